/**
 * The chat's keyboard, as ChatGPT and Open WebUI have taught people: Enter sends,
 * Shift+Enter starts a new line, Esc stops the answer, Ctrl+Shift+O opens a new chat.
 */

export type Shortcut = 'send' | 'stop' | 'new-chat' | null;

export interface Keys {
	key: string;
	shiftKey: boolean;
	ctrlKey: boolean;
	metaKey: boolean;
	altKey: boolean;
	isComposing: boolean;
}

/** What a key press in the message box means (null: let the box have it). */
export function inComposer(event: Keys): Shortcut {
	if (event.isComposing) return null; // an IME is still composing a character
	if (event.key === 'Enter' && !event.shiftKey && !event.altKey && !event.ctrlKey) return 'send';
	return pageWide(event);
}

/** What a key press anywhere on the chat page means. */
export function pageWide(event: Keys): Shortcut {
	if (event.key === 'Escape') return 'stop';
	const mod = event.ctrlKey || event.metaKey;
	if (mod && event.shiftKey && event.key.toLowerCase() === 'o') return 'new-chat';
	return null;
}
