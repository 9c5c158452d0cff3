/** The gateway's workers with their own load figures; drain and restart where supervised. */
import { api, type Schemas } from '$lib/api/client';
import { unwrap } from '$lib/api/errors';

export type Worker = Schemas['WorkerRead'];

export async function listWorkers(): Promise<Worker[]> {
	return unwrap(await api.GET('/api/admin/workers')).workers;
}

export async function drainWorker(index: number): Promise<void> {
	unwrap(await api.POST('/api/admin/workers/{index}/drain', { params: { path: { index } } }));
}

export async function restartWorker(index: number): Promise<void> {
	unwrap(await api.POST('/api/admin/workers/{index}/restart', { params: { path: { index } } }));
}

export type WorkerReload = Schemas['WorkerReload'];

/** A weight swap: answers at once; the worker shows `reloading` until it is over. */
export async function reloadWorker(index: number, body: WorkerReload): Promise<void> {
	unwrap(
		await api.POST('/api/admin/workers/{index}/reload', { params: { path: { index } }, body })
	);
}
