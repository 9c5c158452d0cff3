/** What the chat says when sending fails: a refusal in words, the model busy, an error. */
import { ApiFailure } from '$lib/api/errors';
import { refusalInWords } from '$lib/chat/quota';

export interface Notice {
	kind: 'refusal' | 'error' | 'stopped' | 'busy';
	text: string;
}

/** What a failed send tells the user. */
export function noticeFor(error: unknown, now = new Date(), timeZone?: string): Notice {
	if (!(error instanceof ApiFailure)) return { kind: 'error', text: String(error) };
	if (error.status === 429) {
		const retry = Number(error.headers.get('retry-after'));
		const refusal = refusalInWords(
			error.headers.get('x-enclave-limit'),
			Number.isFinite(retry) && retry > 0 ? retry : null,
			error.message,
			now,
			timeZone
		);
		return { kind: 'refusal', text: refusal.text };
	}
	if (error.status === 503) {
		return {
			kind: 'busy',
			text: `The model is starting or busy; try again in a moment. (${error.message})`
		};
	}
	return { kind: 'error', text: error.message };
}

