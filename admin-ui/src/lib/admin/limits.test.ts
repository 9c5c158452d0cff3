import { describe, expect, it } from 'vitest';
import { limitChanges, parseLimit, type Limits } from './limits';

const none: Limits = {
	requests_per_minute: null,
	tokens_per_minute: null,
	concurrent_requests: null,
	daily_token_quota: null,
	monthly_token_quota: null
};

describe('parseLimit', () => {
	it('reads empty as no limit and accepts separators', () => {
		expect(parseLimit('')).toBeNull();
		expect(parseLimit(' 2,000,000 ')).toBe(2_000_000);
		expect(parseLimit('1_000')).toBe(1000);
	});

	it('refuses what the gateway would refuse', () => {
		for (const bad of ['0', '-5', '1.5', 'lots', '1e3', '99999999999999999999']) {
			expect(parseLimit(bad)).toBeInstanceOf(Error);
		}
	});
});

describe('limitChanges', () => {
	it('lists only what changes, with the effect on what was used', () => {
		const before = { ...none, daily_token_quota: 50_000, requests_per_minute: 60 };
		const after = { ...none, daily_token_quota: 10_000, requests_per_minute: 60, monthly_token_quota: 2_000_000 };
		const changes = limitChanges(before, after, { today: 12_000, month: 150_000 });
		expect(changes).toEqual([
			{
				field: 'daily_token_quota',
				label: 'Tokens per day',
				from: '50,000',
				to: '10,000',
				effect: '12,000 already used today: refused until the reset'
			},
			{
				field: 'monthly_token_quota',
				label: 'Tokens per month',
				from: 'no limit',
				to: '2 million',
				effect: '150,000 used this month, 1.8 million left'
			}
		]);
	});

	it('says nothing of use it does not know', () => {
		const changes = limitChanges(none, { ...none, daily_token_quota: 5 }, null);
		expect(changes[0]?.effect).toBeNull();
	});
});
