/** Departments and the IdP-group mappings that put people in them (/api/admin/...). */
import { api, type Schemas } from '$lib/api/client';
import { unwrap } from '$lib/api/errors';

export type Department = Schemas['DepartmentRead'];
export type DepartmentCreate = Schemas['DepartmentCreate'];
export type DepartmentUpdate = Schemas['DepartmentUpdate'];
export type GroupMapping = Schemas['GroupMappingRead'];

export async function listDepartments(after: string | null, limit = 50, q = '') {
	const query = { limit, ...(after ? { after } : {}), ...(q.trim() ? { q: q.trim() } : {}) };
	return unwrap(await api.GET('/api/admin/departments', { params: { query } }));
}

/** Every department (for pickers): pages until done; an appliance has tens, not thousands. */
export async function allDepartments(): Promise<Department[]> {
	const all: Department[] = [];
	let after: string | null = null;
	do {
		const page = await listDepartments(after, 200);
		all.push(...page.items);
		after = page.next_cursor ?? null;
	} while (after);
	return all;
}

export async function createDepartment(body: DepartmentCreate): Promise<Department> {
	return unwrap(await api.POST('/api/admin/departments', { body }));
}

export async function updateDepartment(id: string, body: DepartmentUpdate): Promise<Department> {
	return unwrap(
		await api.PATCH('/api/admin/departments/{department_id}', {
			params: { path: { department_id: id } },
			body
		})
	);
}

export async function listMappings(after: string | null, limit = 50) {
	const query = after ? { after, limit } : { limit };
	return unwrap(await api.GET('/api/admin/group-mappings', { params: { query } }));
}

export async function mapGroup(group: string, departmentId: string): Promise<GroupMapping> {
	return unwrap(
		await api.POST('/api/admin/group-mappings', { body: { group, department_id: departmentId } })
	);
}

export async function unmapGroup(id: string): Promise<void> {
	unwrap(
		await api.DELETE('/api/admin/group-mappings/{mapping_id}', {
			params: { path: { mapping_id: id } }
		})
	);
}
