/**
 * Server-sent events as the OpenAI API streams them: `data: <json>` lines, events
 * separated by a blank line, `data: [DONE]` at the end. Yields each event's data.
 */
export async function* sseData(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
	const reader = body.getReader();
	const decoder = new TextDecoder();
	let buffer = '';
	try {
		for (;;) {
			const { value, done } = await reader.read();
			if (done) break;
			buffer += decoder.decode(value, { stream: true });
			let end: number;
			while ((end = eventEnd(buffer)) >= 0) {
				const data = dataOf(buffer.slice(0, end));
				buffer = buffer.slice(end).replace(/^(\r\n|\r|\n){1,2}/, '');
				if (data === '[DONE]') return;
				if (data !== null) yield data;
			}
		}
		const rest = dataOf(buffer + decoder.decode());
		if (rest !== null && rest !== '[DONE]') yield rest;
	} finally {
		reader.releaseLock();
	}
}

/** Where the first complete event ends (before its blank line), or -1. */
function eventEnd(buffer: string): number {
	const match = /\r\n\r\n|\n\n|\r\r/.exec(buffer);
	return match ? match.index : -1;
}

/** The joined `data:` lines of one event; null when it has none (a comment, a ping). */
export function dataOf(event: string): string | null {
	const lines = event.split(/\r\n|\r|\n/).filter((line) => line.startsWith('data:'));
	if (lines.length === 0) return null;
	return lines.map((line) => line.slice(5).replace(/^ /, '')).join('\n');
}
