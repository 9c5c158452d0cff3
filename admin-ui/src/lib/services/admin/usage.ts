/** Usage from the gateway's daily rollups (/api/admin/usage): never a scan of the audit log. */
import { api, type Schemas } from '$lib/api/client';
import { unwrap } from '$lib/api/errors';

export type DailyRow = Schemas['DailyRow'];
export type TopRow = Schemas['TopRow'];
export type Refusals = Schemas['RefusalCounts'];

export interface Range {
	since: string; // YYYY-MM-DD, UTC
	until: string;
	department_id?: string;
}

function query(range: Range): Record<string, string> {
	const q: Record<string, string> = { since: range.since, until: range.until };
	if (range.department_id) q.department_id = range.department_id;
	return q;
}

export async function daily(range: Range): Promise<DailyRow[]> {
	return unwrap(await api.GET('/api/admin/usage/daily', { params: { query: query(range) } })).rows;
}

export async function top(range: Range, by: 'user' | 'key', limit = 10): Promise<TopRow[]> {
	const params = { query: { ...query(range), by, limit: String(limit) } };
	return unwrap(await api.GET('/api/admin/usage/top', { params })).items;
}

export async function refusals(range: Range): Promise<Refusals> {
	return unwrap(await api.GET('/api/admin/usage/refusals', { params: { query: query(range) } }));
}

export function exportUrl(range: Range): string {
	return `/api/admin/usage/export.csv?${new URLSearchParams(query(range))}`;
}
