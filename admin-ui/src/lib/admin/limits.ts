/**
 * A department's limits as the console edits them: form text to API values, and the
 * changes a save would make, said with their effect on today's and this month's use.
 */
import { tokensInWords } from '$lib/chat/quota';

export const LIMITS = [
	['requests_per_minute', 'Requests per minute'],
	['tokens_per_minute', 'Tokens per minute'],
	['concurrent_requests', 'Concurrent requests'],
	['daily_token_quota', 'Tokens per day'],
	['monthly_token_quota', 'Tokens per month']
] as const;

export type LimitField = (typeof LIMITS)[number][0];
export type Limits = Record<LimitField, number | null>;

/** "" is no limit; otherwise a whole number from 1 to 2^53 - 1 (what the gateway keeps). */
export function parseLimit(text: string): number | null | Error {
	const trimmed = text.trim().replaceAll(',', '').replaceAll('_', '');
	if (trimmed === '') return null;
	if (!/^\d+$/.test(trimmed)) return new Error('a whole number, or empty for no limit');
	const value = Number(trimmed);
	if (value < 1 || !Number.isSafeInteger(value)) return new Error('from 1 to 9,007,199,254,740,991');
	return value;
}

export function limitText(value: number | null | undefined): string {
	return value === null || value === undefined ? '' : String(value);
}

export interface Change {
	field: string;
	label: string;
	from: string;
	to: string;
	/** What the new value means now, when it can be said: "used today: 12,000 of 10,000". */
	effect: string | null;
}

export interface CurrentUse {
	today: number;
	month: number;
}

function shown(value: number | null | undefined): string {
	return value === null || value === undefined ? 'no limit' : tokensInWords(value);
}

/** The limits that differ, each with its effect on what the department has used. */
export function limitChanges(before: Partial<Limits>, after: Limits, use: CurrentUse | null): Change[] {
	const changes: Change[] = [];
	for (const [field, label] of LIMITS) {
		const old = before[field] ?? null;
		const next = after[field];
		if (old === next) continue;
		let effect: string | null = null;
		const used = field === 'daily_token_quota' ? use?.today : field === 'monthly_token_quota' ? use?.month : undefined;
		if (used !== undefined) {
			const period = field === 'daily_token_quota' ? 'today' : 'this month';
			if (next === null) effect = `no limit: ${tokensInWords(used)} used ${period}`;
			else if (used >= next) effect = `${tokensInWords(used)} already used ${period}: refused until the reset`;
			else effect = `${tokensInWords(used)} used ${period}, ${tokensInWords(next - used)} left`;
		}
		changes.push({ field, label, from: shown(old), to: shown(next), effect });
	}
	return changes;
}
