/** API keys for internal apps (/api/admin/keys): the secret is shown once, at creation. */
import { api, type Schemas } from '$lib/api/client';
import { unwrap } from '$lib/api/errors';

export type Key = Schemas['KeyRead'];
export type KeyCreated = Schemas['KeyCreated'];
export type KeyCreate = Schemas['KeyCreate'];

export async function listKeys(after: string | null, departmentId: string | null, q = '', limit = 50) {
	const query: { after?: string; limit: number; department_id?: string; q?: string } = { limit };
	if (after) query.after = after;
	if (q.trim()) query.q = q.trim();
	if (departmentId) query.department_id = departmentId;
	return unwrap(await api.GET('/api/admin/keys', { params: { query } }));
}

export async function createKey(body: KeyCreate): Promise<KeyCreated> {
	return unwrap(await api.POST('/api/admin/keys', { body }));
}

export async function revokeKey(id: string): Promise<Key> {
	return unwrap(
		await api.POST('/api/admin/keys/{key_id}/revoke', { params: { path: { key_id: id } } })
	);
}

/** A new secret for the key; the old one keeps working for ``graceSeconds``. */
export async function rotateKey(id: string, graceSeconds: number): Promise<KeyCreated> {
	return unwrap(
		await api.POST('/api/admin/keys/{key_id}/rotate', {
			params: { path: { key_id: id } },
			body: { grace_seconds: graceSeconds }
		})
	);
}
