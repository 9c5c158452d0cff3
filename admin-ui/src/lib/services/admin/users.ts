/** People: their department, role and whether they may sign in (/api/admin/users). */
import { api, type Schemas } from '$lib/api/client';
import { unwrap } from '$lib/api/errors';

export type User = Schemas['UserRead'];
export type UserUpdate = Schemas['UserUpdate'];

export async function listUsers(after: string | null, limit = 50) {
	const query = after ? { after, limit } : { limit };
	return unwrap(await api.GET('/api/admin/users', { params: { query } }));
}

export async function updateUser(id: string, body: UserUpdate): Promise<User> {
	return unwrap(
		await api.PATCH('/api/admin/users/{user_id}', { params: { path: { user_id: id } }, body })
	);
}
