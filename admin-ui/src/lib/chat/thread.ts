/**
 * The chat's edits, as data: what to keep of a conversation and what to ask the model.
 * Sending, regenerating and editing all end the same way: the stored messages are cut at
 * some position, a user message may be added, and the model answers the whole thread.
 */

export interface Turn {
	role: 'user' | 'assistant';
	content: string;
	position: number;
}

export interface WireMessage {
	role: 'system' | 'user' | 'assistant';
	content: string;
}

export interface Plan {
	/** Cut the stored conversation from this position first (null: keep everything). */
	truncateFrom: number | null;
	/** The user message to store before asking (null when regenerating). */
	userMessage: string | null;
	/** What the model is sent: the system prompt, then the kept turns, then the new one. */
	request: WireMessage[];
}

function wire(systemPrompt: string, turns: readonly Turn[], extra: string | null): WireMessage[] {
	const messages: WireMessage[] = [];
	if (systemPrompt.trim()) messages.push({ role: 'system', content: systemPrompt });
	for (const turn of turns) messages.push({ role: turn.role, content: turn.content });
	if (extra !== null) messages.push({ role: 'user', content: extra });
	return messages;
}

/** A new message at the end of the conversation. */
export function planSend(systemPrompt: string, turns: readonly Turn[], text: string): Plan {
	return { truncateFrom: null, userMessage: text, request: wire(systemPrompt, turns, text) };
}

/**
 * A new answer to the last user message: the answer after it (if any) goes. Null when
 * there is no user message to answer.
 */
export function planRegenerate(systemPrompt: string, turns: readonly Turn[]): Plan | null {
	let last = turns.length - 1;
	while (last >= 0 && turns[last]?.role !== 'user') last--;
	if (last < 0) return null;
	const kept = turns.slice(0, last + 1);
	const cut = turns[last + 1];
	return {
		truncateFrom: cut ? cut.position : null,
		userMessage: null,
		request: wire(systemPrompt, kept, null)
	};
}

/** The user message at ``position`` rewritten: it and everything after it go, the new
 * text takes its place, and the model answers from there. Null for a position that is
 * not a user message. */
export function planEdit(
	systemPrompt: string,
	turns: readonly Turn[],
	position: number,
	text: string
): Plan | null {
	const index = turns.findIndex((turn) => turn.position === position);
	if (index < 0 || turns[index]?.role !== 'user') return null;
	return {
		truncateFrom: position,
		userMessage: text,
		request: wire(systemPrompt, turns.slice(0, index), text)
	};
}

/** A title from the first message: its first line, at most 60 characters. */
export function titleFrom(text: string): string {
	const line = text.trim().split('\n', 1)[0] ?? '';
	const title = line.length > 60 ? `${line.slice(0, 59).trimEnd()}…` : line;
	return title || 'New chat';
}
