/** Department assistants, for admins (/api/admin/assistants). */
import { api, csrfHeaders, reportUnauthorized, type Schemas } from '$lib/api/client';
import { ApiFailure, messageOf, unwrap } from '$lib/api/errors';

export type Assistant = Schemas['AssistantRead'];
export type AssistantCreate = Schemas['AssistantCreate'];
export type AssistantUpdate = Schemas['AssistantUpdate'];
export type AssistantVersion = Schemas['AssistantVersionRead'];

const byId = (id: string) => ({ params: { path: { assistant_id: id } } });

export async function listAssistants(after: string | null, limit = 50, q = '', departmentId = '') {
	const query = {
		limit,
		...(after ? { after } : {}),
		...(q.trim() ? { q: q.trim() } : {}),
		...(departmentId ? { department_id: departmentId } : {})
	};
	return unwrap(await api.GET('/api/admin/assistants', { params: { query } }));
}

export async function getAssistant(id: string): Promise<Assistant> {
	return unwrap(await api.GET('/api/admin/assistants/{assistant_id}', byId(id)));
}

export async function createAssistant(body: AssistantCreate): Promise<Assistant> {
	return unwrap(await api.POST('/api/admin/assistants', { body }));
}

export async function updateAssistant(id: string, body: AssistantUpdate): Promise<Assistant> {
	return unwrap(await api.PATCH('/api/admin/assistants/{assistant_id}', { ...byId(id), body }));
}

export async function archiveAssistant(id: string): Promise<void> {
	unwrap(await api.DELETE('/api/admin/assistants/{assistant_id}', byId(id)));
}

export async function listVersions(id: string): Promise<AssistantVersion[]> {
	return unwrap(await api.GET('/api/admin/assistants/{assistant_id}/versions', byId(id))).items;
}

/** The prompt's length in the model's tokens, as a worker counts it. */
export async function countTokens(text: string, model: string | null): Promise<number> {
	const body = model ? { text, model } : { text };
	return unwrap(await api.POST('/api/admin/assistants/tokens', { body })).tokens;
}

/** The text of an uploaded .txt, .md or .pdf file, read by the gateway. */
export async function extractText(file: File): Promise<string> {
	const form = new FormData();
	form.append('file', file);
	const response = await fetch('/api/admin/assistants/extract', {
		method: 'POST',
		credentials: 'same-origin',
		headers: csrfHeaders('POST'),
		body: form
	});
	const body: unknown = await response.json().catch(() => null);
	if (!response.ok) {
		if (response.status === 401) reportUnauthorized();
		const { message, code } = messageOf(body, response.status);
		throw new ApiFailure(response.status, message, code, response.headers);
	}
	return (body as { text: string }).text;
}
