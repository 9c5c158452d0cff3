import { describe, expect, it } from 'vitest';
import { periodInWords, refusalInWords, tokensInWords, waitInWords } from './quota';

const NOW = new Date('2026-12-03T19:00:00Z');

describe('refusalInWords', () => {
	it('names the daily quota and its reset at midnight UTC, in words', () => {
		const refusal = refusalInWords('tokens_per_day', 5 * 3600, 'raw', NOW, 'UTC');
		expect(refusal.text).toBe(
			"Your department's daily token quota is used up. It resets on Fri 4 Dec at 00:00 (in 5 hours)."
		);
		expect(refusal.retryAt?.toISOString()).toBe('2026-12-04T00:00:00.000Z');
	});

	it('says "try again" for a rate limit that frees up the same day', () => {
		const refusal = refusalInWords('requests_per_minute', 30, 'raw', NOW, 'UTC');
		expect(refusal.text).toBe(
			"Your department's requests-per-minute limit is reached. Try again at 19:00 (in 30 seconds)."
		);
	});

	it("falls back to the gateway's message for a refusal it does not know", () => {
		expect(refusalInWords('something_new', null, 'the gateway says no', NOW).text).toBe(
			'the gateway says no'
		);
	});
});

describe('words', () => {
	it('rounds waits up to the unit people use', () => {
		expect(waitInWords(0.2)).toBe('in 1 second');
		expect(waitInWords(90)).toBe('in 90 seconds');
		expect(waitInWords(91)).toBe('in 2 minutes');
		expect(waitInWords(7201)).toBe('in 3 hours');
		expect(waitInWords(3 * 86400)).toBe('in 3 days');
	});

	it('writes token counts for people', () => {
		expect(tokensInWords(12345)).toBe('12,345');
		expect(tokensInWords(1_250_000)).toBe('1.2 million');
	});

	it('says what is left in a period, or that there is no limit', () => {
		const period = { limit: 1000, used: 250, remaining: 750, resets_at: '' };
		expect(periodInWords(period, 'today')).toBe('750 tokens left today');
		expect(periodInWords({ ...period, limit: null, remaining: null }, 'this month')).toBe(
			'no monthly limit'
		);
	});
});
