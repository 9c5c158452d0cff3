import { describe, expect, it } from 'vitest';
import { ApiFailure } from '$lib/api/errors';
import { noticeFor } from './notices';

const NOW = new Date('2026-12-03T10:00:00Z');

describe('noticeFor', () => {
	it('says a quota refusal in words, with the reset from Retry-After', () => {
		const headers = new Headers({ 'retry-after': '50400', 'x-enclave-limit': 'tokens_per_day' });
		const notice = noticeFor(new ApiFailure(429, 'research: 30 tokens per day reached', null, headers), NOW, 'UTC');
		expect(notice).toEqual({
			kind: 'refusal',
			text: "Your department's daily token quota is used up. It resets on Fri 4 Dec at 00:00 (in 14 hours)."
		});
	});

	it("keeps the gateway's words for a 429 without the header", () => {
		const notice = noticeFor(new ApiFailure(429, 'slow down'), NOW);
		expect(notice).toEqual({ kind: 'refusal', text: 'slow down' });
	});

	it('says the model is starting or busy on a 503', () => {
		const notice = noticeFor(new ApiFailure(503, 'no healthy worker serves the model'), NOW);
		expect(notice.kind).toBe('busy');
		expect(notice.text).toContain('starting or busy');
	});

	it('passes other failures on as they are', () => {
		expect(noticeFor(new ApiFailure(400, 'bad model'), NOW)).toEqual({ kind: 'error', text: 'bad model' });
		expect(noticeFor(new Error('boom'), NOW).kind).toBe('error');
	});
});
