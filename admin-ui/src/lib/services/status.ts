/** The department's quota use and the models' state, as the gateway reports them. */
import { api, type Schemas } from '$lib/api/client';
import { unwrap } from '$lib/api/errors';

export type Usage = Schemas['UsageRead'];
export type Status = Schemas['StatusRead'];

export async function getUsage(): Promise<Usage> {
	return unwrap(await api.GET('/api/me/usage'));
}

export async function getStatus(): Promise<Status> {
	return unwrap(await api.GET('/api/status'));
}
