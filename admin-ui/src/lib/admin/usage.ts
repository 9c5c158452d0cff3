/** The usage view's arithmetic: ranges, and the daily rows as chart series and totals. */
import type { DailyRow } from '$lib/services/admin/usage';

/** The last ``days`` UTC days up to ``today``, as the API's inclusive YYYY-MM-DD range. */
export function lastDays(days: number, today: Date): { since: string; until: string } {
	const until = today.toISOString().slice(0, 10);
	const start = new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), today.getUTCDate() - (days - 1)));
	return { since: start.toISOString().slice(0, 10), until };
}

/** Every day from ``since`` to ``until``, inclusive. */
export function daysOf(since: string, until: string): string[] {
	const out: string[] = [];
	const day = new Date(`${since}T00:00:00Z`);
	const end = new Date(`${until}T00:00:00Z`);
	while (day <= end && out.length < 400) {
		out.push(day.toISOString().slice(0, 10));
		day.setUTCDate(day.getUTCDate() + 1);
	}
	return out;
}

export interface Series {
	key: string; // department slug
	label: string;
	values: number[]; // one per day
}

/** Tokens (prompt + completion) per department per day, days with no row as 0. */
export function tokensByDepartment(rows: DailyRow[], days: string[]): Series[] {
	const index = new Map(days.map((d, i) => [d, i]));
	const series = new Map<string, Series>();
	for (const row of rows) {
		const i = index.get(row.day);
		if (i === undefined) continue;
		const key = row.department_slug || 'none';
		let s = series.get(key);
		if (!s) {
			s = { key, label: row.department_name || key, values: days.map(() => 0) };
			series.set(key, s);
		}
		s.values[i] = (s.values[i] ?? 0) + row.prompt_tokens + row.completion_tokens;
	}
	return [...series.values()].sort((a, b) => a.key.localeCompare(b.key));
}

export interface Totals {
	requests: number;
	tokens: number;
	cached: number;
	ui: number; // tokens through the chat
	api: number; // tokens through API keys
	errors: number;
	refusals: number;
}

export function totals(rows: DailyRow[]): Totals {
	const t: Totals = { requests: 0, tokens: 0, cached: 0, ui: 0, api: 0, errors: 0, refusals: 0 };
	for (const row of rows) {
		const tokens = row.prompt_tokens + row.completion_tokens;
		t.requests += row.requests;
		t.tokens += tokens;
		t.cached += row.cached_tokens;
		t[row.via] += tokens;
		t.errors += row.errors;
		t.refusals += row.refusals;
	}
	return t;
}

/** Stacked bars: per day, each series' segment as [y, height] in a ``height``-tall chart. */
export function stacks(series: Series[], height: number): { max: number; bars: [number, number][][] } {
	const days = series[0]?.values.length ?? 0;
	const sums = Array.from({ length: days }, (_, i) => series.reduce((s, x) => s + (x.values[i] ?? 0), 0));
	const max = Math.max(1, ...sums);
	const bars = sums.map((_, i) => {
		let top = height;
		return series.map((s) => {
			const h = ((s.values[i] ?? 0) / max) * height;
			top -= h;
			return [top, h] as [number, number];
		});
	});
	return { max, bars };
}
