/**
 * One answer, streamed from the gateway's OpenAI API (`/v1/chat/completions`), the same
 * path apps use: the department's limits and the audit apply to the chat too. Aborting
 * the signal closes the connection, which the gateway passes on to the engine.
 */
import { csrfHeaders, reportUnauthorized } from '$lib/api/client';
import { ApiFailure, messageOf } from '$lib/api/errors';
import { sseData } from '$lib/chat/sse';
import type { WireMessage } from '$lib/chat/thread';

export interface Usage {
	prompt_tokens: number;
	completion_tokens: number;
}

export interface Answer {
	content: string;
	usage: Usage | null;
	finishReason: string | null;
	/** True when the user stopped it: ``content`` is what had arrived. */
	stopped: boolean;
	/** The ``x-enclave-assistant`` header: which assistant version answered, if any. */
	assistant: string | null;
}

interface Chunk {
	choices?: { delta?: { content?: string | null }; finish_reason?: string | null }[];
	usage?: Usage | null;
	error?: { message?: string; code?: string };
}

export interface StreamOptions {
	model: string;
	messages: WireMessage[];
	signal: AbortSignal;
	/** Called with each piece of text as it arrives. */
	onText: (text: string) => void;
	fetcher?: typeof fetch;
}

export async function streamAnswer(options: StreamOptions): Promise<Answer> {
	const { model, messages, signal, onText } = options;
	const fetcher = options.fetcher ?? fetch;
	const answer: Answer = { content: '', usage: null, finishReason: null, stopped: false, assistant: null };
	let response: Response;
	try {
		response = await fetcher('/v1/chat/completions', {
			method: 'POST',
			credentials: 'same-origin',
			headers: { 'Content-Type': 'application/json', ...csrfHeaders('POST') },
			body: JSON.stringify({
				model,
				messages,
				stream: true,
				stream_options: { include_usage: true }
			}),
			signal
		});
	} catch (error) {
		if (signal.aborted) return { ...answer, stopped: true };
		throw new ApiFailure(0, 'the gateway cannot be reached; check your connection');
	}
	if (!response.ok || !response.body) {
		if (response.status === 401) reportUnauthorized();
		const body: unknown = await response.json().catch(() => null);
		const { message, code } = messageOf(body, response.status);
		throw new ApiFailure(response.status, message, code, response.headers);
	}
	answer.assistant = response.headers.get('x-enclave-assistant');
	try {
		for await (const data of sseData(response.body)) {
			const chunk = JSON.parse(data) as Chunk;
			if (chunk.error) {
				throw new ApiFailure(502, chunk.error.message ?? 'the answer failed', chunk.error.code ?? null);
			}
			const choice = chunk.choices?.[0];
			// NUL is the one character the gateway refuses to store (Postgres cannot hold it);
			// a model that emits one gets the replacement character instead.
			const text = choice?.delta?.content?.replaceAll('\u0000', '\uFFFD');
			if (text) {
				answer.content += text;
				onText(text);
			}
			if (choice?.finish_reason) answer.finishReason = choice.finish_reason;
			if (chunk.usage) answer.usage = chunk.usage;
		}
	} catch (error) {
		if (signal.aborted) return { ...answer, stopped: true };
		if (error instanceof ApiFailure) throw error;
		throw new ApiFailure(0, 'the answer was cut off (the connection closed)');
	}
	return answer;
}
