/** The models the user's department may use (the gateway filters /v1/models). */
import { api } from '$lib/api/client';
import { unwrap } from '$lib/api/errors';

export async function listModels(): Promise<string[]> {
	return unwrap(await api.GET('/v1/models')).data.map((card) => card.id);
}
