import { describe, expect, it } from 'vitest';
import type { DailyRow } from '$lib/services/admin/usage';
import { daysOf, lastDays, stacks, tokensByDepartment, totals } from './usage';

function row(day: string, slug: string, via: 'ui' | 'api', prompt: number, completion: number): DailyRow {
	return {
		day,
		department_id: slug,
		department_slug: slug,
		department_name: slug.toUpperCase(),
		via,
		requests: 1,
		prompt_tokens: prompt,
		completion_tokens: completion,
		cached_tokens: 1,
		errors: 0,
		refusals: 0
	};
}

describe('usage arithmetic', () => {
	it('makes inclusive UTC ranges', () => {
		expect(lastDays(7, new Date('2026-12-03T23:30:00Z'))).toEqual({ since: '2026-11-27', until: '2026-12-03' });
		expect(daysOf('2026-02-27', '2026-03-01')).toEqual(['2026-02-27', '2026-02-28', '2026-03-01']);
	});

	it('sums tokens per department per day, the missing days as 0', () => {
		const days = daysOf('2026-12-01', '2026-12-03');
		const rows = [row('2026-12-01', 'qa', 'ui', 10, 5), row('2026-12-01', 'qa', 'api', 1, 1), row('2026-12-03', 'eng', 'api', 4, 4)];
		expect(tokensByDepartment(rows, days)).toEqual([
			{ key: 'eng', label: 'ENG', values: [0, 0, 8] },
			{ key: 'qa', label: 'QA', values: [17, 0, 0] }
		]);
		expect(totals(rows)).toEqual({ requests: 3, tokens: 25, cached: 3, ui: 15, api: 10, errors: 0, refusals: 0 });
	});

	it('stacks each day against the busiest one', () => {
		const { max, bars } = stacks(
			[
				{ key: 'a', label: 'A', values: [1, 3] },
				{ key: 'b', label: 'B', values: [1, 1] }
			],
			100
		);
		expect(max).toBe(4);
		expect(bars[1]).toEqual([
			[25, 75],
			[0, 25]
		]);
		expect(bars[0]).toEqual([
			[75, 25],
			[50, 25]
		]);
	});
});
