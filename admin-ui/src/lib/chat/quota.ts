/**
 * Quotas and refusals in words: what the chat shows before a message is sent (tokens left)
 * and when the gateway refuses one (which limit, and when it resets).
 */

/** The limit a 429 names in its `x-enclave-limit` header (the gateway's limiter reasons). */
export type LimitReason =
	| 'requests_per_minute'
	| 'tokens_per_minute'
	| 'concurrent_requests'
	| 'tokens_per_day'
	| 'tokens_per_month';

const WHAT: Record<LimitReason, string> = {
	requests_per_minute: "Your department's requests-per-minute limit is reached.",
	tokens_per_minute: "Your department's tokens-per-minute limit is reached.",
	concurrent_requests: 'Your department has as many answers running as it may.',
	tokens_per_day: "Your department's daily token quota is used up.",
	tokens_per_month: "Your department's monthly token quota is used up."
};

export function isLimitReason(value: string | null): value is LimitReason {
	return value !== null && value in WHAT;
}

/** 12,345 → "12,345"; 1,234,567 → "1.2 million". */
export function tokensInWords(count: number): string {
	if (count >= 1_000_000) {
		const millions = Math.floor(count / 100_000) / 10;
		return `${millions.toLocaleString('en-US')} million`;
	}
	return count.toLocaleString('en-US');
}

/** "in 40 seconds", "in 5 minutes", "in 3 hours", "in 2 days" (rounded up). */
export function waitInWords(seconds: number): string {
	const s = Math.max(1, Math.ceil(seconds));
	const units: [number, string][] = [
		[86_400, 'day'],
		[3_600, 'hour'],
		[60, 'minute']
	];
	for (const [size, name] of units) {
		if (s >= 2 * size || (size === 60 && s > 90)) {
			const n = Math.ceil(s / size);
			return `in ${n} ${name}${n === 1 ? '' : 's'}`;
		}
	}
	return `in ${s} second${s === 1 ? '' : 's'}`;
}

/** A moment as people read it: "at 14:05" today, "on Tue 1 Dec at 00:00" otherwise. */
export function momentInWords(at: Date, now: Date, timeZone?: string): string {
	const time = at.toLocaleTimeString('en-GB', { hour: '2-digit', minute: '2-digit', timeZone });
	const day = (d: Date) => d.toLocaleDateString('en-GB', { timeZone });
	if (day(at) === day(now)) return `at ${time}`;
	const date = at.toLocaleDateString('en-GB', {
		weekday: 'short',
		day: 'numeric',
		month: 'short',
		timeZone
	});
	return `on ${date} at ${time}`;
}

export interface Refusal {
	/** The sentence to show: what refused and when it frees up. */
	text: string;
	/** When sending can work again (for quotas: the reset), if known. */
	retryAt: Date | null;
}

/**
 * What a refused message says. ``retryAfter`` is the Retry-After header in seconds; the
 * gateway's own message is the fallback for a refusal this app does not know.
 */
export function refusalInWords(
	reason: string | null,
	retryAfter: number | null,
	gatewayMessage: string,
	now: Date,
	timeZone?: string
): Refusal {
	const retryAt = retryAfter !== null ? new Date(now.getTime() + retryAfter * 1000) : null;
	if (!isLimitReason(reason)) return { text: gatewayMessage, retryAt };
	if (retryAt === null || retryAfter === null) return { text: WHAT[reason], retryAt };
	const quota = reason === 'tokens_per_day' || reason === 'tokens_per_month';
	const when = `${momentInWords(retryAt, now, timeZone)} (${waitInWords(retryAfter)})`;
	const next = quota ? `It resets ${when}.` : `Try again ${when}.`;
	return { text: `${WHAT[reason]} ${next}`, retryAt };
}

export interface QuotaPeriod {
	limit: number | null;
	used: number;
	remaining: number | null;
	resets_at: string;
}

/** "12,000 tokens left today" / "no daily limit". */
export function periodInWords(period: QuotaPeriod, name: 'today' | 'this month'): string {
	if (period.limit === null || period.remaining === null) {
		return name === 'today' ? 'no daily limit' : 'no monthly limit';
	}
	return `${tokensInWords(Math.max(0, period.remaining))} tokens left ${name}`;
}
