/** The department's assistants, as an employee may use them (/api/assistants). */
import { api, type Schemas } from '$lib/api/client';
import { unwrap } from '$lib/api/errors';

export type AssistantCard = Schemas['AssistantCard'];

export async function listAssistants(): Promise<AssistantCard[]> {
	return unwrap(await api.GET('/api/assistants')).items;
}

/** The version in an answer's ``x-enclave-assistant: <slug>; version=<n>`` header. */
export function answeredVersion(header: string | null): number | null {
	const match = header?.match(/;\s*version=(\d+)\s*$/);
	return match ? Number(match[1]) : null;
}
