/** People: their department, role and whether they may sign in (/api/admin/users). */
import { api, type Schemas } from '$lib/api/client';
import { unwrap } from '$lib/api/errors';

export type User = Schemas['UserRead'];
export type UserUpdate = Schemas['UserUpdate'];

export async function listUsers(after: string | null, q = '', limit = 50) {
	const query = { limit, ...(after ? { after } : {}), ...(q.trim() ? { q: q.trim() } : {}) };
	return unwrap(await api.GET('/api/admin/users', { params: { query } }));
}

export async function updateUser(id: string, body: UserUpdate): Promise<User> {
	return unwrap(
		await api.PATCH('/api/admin/users/{user_id}', { params: { path: { user_id: id } }, body })
	);
}
