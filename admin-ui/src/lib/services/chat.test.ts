import { describe, expect, it } from 'vitest';
import { setCsrfToken } from '$lib/api/client';
import { ApiFailure } from '$lib/api/errors';
import { streamAnswer } from './chat';

function sse(events: unknown[]): string {
	return events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('') + 'data: [DONE]\n\n';
}

const delta = (content: string, finish: string | null = null) => ({
	choices: [{ delta: { content }, finish_reason: finish }]
});

describe('streamAnswer', () => {
	it('sends the thread with the CSRF token and gathers the streamed text and usage', async () => {
		setCsrfToken('tok');
		let sent: RequestInit | undefined;
		const fetcher = (async (_url: string, init: RequestInit) => {
			sent = init;
			const usage = { usage: { prompt_tokens: 5, completion_tokens: 2 }, choices: [] };
			const headers = { 'x-enclave-assistant': 'qa-desk; version=3' };
			return new Response(sse([delta('Hel'), delta('lo', 'stop'), usage]), { status: 200, headers });
		}) as unknown as typeof fetch;
		const pieces: string[] = [];
		const answer = await streamAnswer({
			model: 'm',
			messages: [{ role: 'user', content: 'hi' }],
			signal: new AbortController().signal,
			onText: (t) => pieces.push(t),
			fetcher
		});
		expect(pieces).toEqual(['Hel', 'lo']);
		expect(answer).toEqual({
			content: 'Hello',
			usage: { prompt_tokens: 5, completion_tokens: 2 },
			finishReason: 'stop',
			stopped: false,
			assistant: 'qa-desk; version=3'
		});
		expect((sent?.headers as Record<string, string>)['X-CSRF-Token']).toBe('tok');
		expect(JSON.parse(String(sent?.body)).stream_options).toEqual({ include_usage: true });
	});

	it('replaces NUL, which the conversation store refuses, in what it gathers', async () => {
		const fetcher = (async () =>
			new Response(sse([delta('a\u0000b')]), { status: 200 })) as unknown as typeof fetch;
		const answer = await streamAnswer({
			model: 'm',
			messages: [],
			signal: new AbortController().signal,
			onText: () => {},
			fetcher
		});
		expect(answer.content).toBe('a\uFFFDb');
	});

	it('turns a refusal into an ApiFailure that keeps the headers', async () => {
		const fetcher = (async () =>
			new Response(JSON.stringify({ error: { message: 'quota', code: 'rate_limit_exceeded' } }), {
				status: 429,
				headers: { 'retry-after': '60', 'x-enclave-limit': 'tokens_per_day' }
			})) as unknown as typeof fetch;
		const failure = await streamAnswer({
			model: 'm',
			messages: [],
			signal: new AbortController().signal,
			onText: () => {},
			fetcher
		}).catch((e: unknown) => e);
		expect(failure).toBeInstanceOf(ApiFailure);
		expect((failure as ApiFailure).status).toBe(429);
		expect((failure as ApiFailure).headers.get('x-enclave-limit')).toBe('tokens_per_day');
	});

	it('reports a stop as a stopped answer with what had arrived', async () => {
		const controller = new AbortController();
		const fetcher = (async (_url: string, init: RequestInit) => {
			const encoder = new TextEncoder();
			const body = new ReadableStream<Uint8Array>({
				start(stream) {
					stream.enqueue(encoder.encode(`data: ${JSON.stringify(delta('partial'))}\n\n`));
					init.signal?.addEventListener('abort', () => stream.error(new DOMException('aborted', 'AbortError')));
				}
			});
			return new Response(body, { status: 200 });
		}) as unknown as typeof fetch;
		const answer = await streamAnswer({
			model: 'm',
			messages: [],
			signal: controller.signal,
			onText: () => controller.abort(),
			fetcher
		});
		expect(answer.stopped).toBe(true);
		expect(answer.content).toBe('partial');
	});

	it('fails on an error event in the middle of the stream', async () => {
		const fetcher = (async () =>
			new Response(sse([delta('a'), { error: { message: 'worker died' } }]), {
				status: 200
			})) as unknown as typeof fetch;
		await expect(
			streamAnswer({ model: 'm', messages: [], signal: new AbortController().signal, onText: () => {}, fetcher })
		).rejects.toThrow('worker died');
	});
});

describe('answeredVersion', () => {
	it('reads the version from the x-enclave-assistant header', async () => {
		const { answeredVersion } = await import('./assistants');
		expect(answeredVersion('qa-desk; version=12')).toBe(12);
		expect(answeredVersion(null)).toBeNull();
		expect(answeredVersion('qa-desk')).toBeNull();
		expect(answeredVersion('qa-desk; version=x')).toBeNull();
	});
});
