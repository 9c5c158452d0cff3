/** The audit log: filtered pages, one record, the CSV export's address. */
import { api, type Schemas } from '$lib/api/client';
import { unwrap } from '$lib/api/errors';

export type AuditRecord = Schemas['RecordRead'];

export interface AuditFilter {
	since?: string;
	until?: string;
	department_id?: string;
	user_id?: string;
	api_key_id?: string;
	status?: string;
	action?: string;
}

function defined(filter: AuditFilter): Record<string, string> {
	return Object.fromEntries(Object.entries(filter).filter(([, v]) => v !== undefined && v !== ''));
}

export async function listAudit(filter: AuditFilter, after: string | null, limit = 50) {
	const query = { ...defined(filter), limit: String(limit), ...(after ? { after } : {}) };
	return unwrap(await api.GET('/api/admin/audit', { params: { query } }));
}

export async function getRecord(seq: number): Promise<AuditRecord> {
	return unwrap(await api.GET('/api/admin/audit/{seq}', { params: { path: { seq } } }));
}

export function exportUrl(filter: AuditFilter): string {
	const query = new URLSearchParams(defined(filter));
	return `/api/admin/audit/export.csv${query.size ? `?${query}` : ''}`;
}

export type ChainVerdict = Schemas['VerifyRead'];

/** Walk the whole chain on the gateway (it may take a while on a long log). */
export async function verifyChain(): Promise<ChainVerdict> {
	return unwrap(await api.POST('/api/admin/audit/verify'));
}
