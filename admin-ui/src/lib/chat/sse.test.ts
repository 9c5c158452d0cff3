import { describe, expect, it } from 'vitest';
import { dataOf, sseData } from './sse';

function streamOf(...chunks: string[]): ReadableStream<Uint8Array> {
	const encoder = new TextEncoder();
	return new ReadableStream({
		start(controller) {
			for (const chunk of chunks) controller.enqueue(encoder.encode(chunk));
			controller.close();
		}
	});
}

async function all(stream: ReadableStream<Uint8Array>): Promise<string[]> {
	const out: string[] = [];
	for await (const data of sseData(stream)) out.push(data);
	return out;
}

describe('sseData', () => {
	it('yields each event once, however the bytes are split', async () => {
		const text = 'data: {"a":1}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n';
		const whole = await all(streamOf(text));
		const bytewise = await all(streamOf(...text.split('')));
		expect(whole).toEqual(['{"a":1}', '{"b":2}']);
		expect(bytewise).toEqual(whole);
	});

	it('stops at [DONE] and ignores what follows', async () => {
		expect(await all(streamOf('data: 1\n\ndata: [DONE]\n\ndata: 2\n\n'))).toEqual(['1']);
	});

	it('skips comments and keeps a last event without its blank line', async () => {
		expect(await all(streamOf(': ping\n\ndata: x\r\n\r\ndata: y'))).toEqual(['x', 'y']);
	});

	it('keeps a multi-byte character split across chunks', async () => {
		const bytes = new TextEncoder().encode('data: "é€"\n\n');
		const stream = new ReadableStream<Uint8Array>({
			start(controller) {
				for (const byte of bytes) controller.enqueue(new Uint8Array([byte]));
				controller.close();
			}
		});
		expect(await all(stream)).toEqual(['"é€"']);
	});
});

describe('dataOf', () => {
	it('joins data lines and ignores other fields', () => {
		expect(dataOf('event: x\ndata: a\ndata: b')).toBe('a\nb');
		expect(dataOf('id: 3')).toBeNull();
	});
});
