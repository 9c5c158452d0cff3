/**
 * What the chat shows around the conversation: the models the department may use and
 * whether they are ready, loading or busy (/api/status), and the tokens left today and
 * this month (/api/me/usage).
 * Polled while the page is visible, and refreshed after every answer.
 */
import { getStatus, getUsage, type Status, type Usage } from '$lib/services/status';

const POLL_MS = 10_000;

class StatusStore {
	models = $state<string[]>([]);
	status = $state<Status | null>(null);
	usage = $state<Usage | null>(null);
	#timer: ReturnType<typeof setInterval> | null = null;

	/** The state of ``model``: 'ready', 'loading', 'unavailable', or 'starting' (no worker
	 * has answered yet). */
	stateOf(model: string): string {
		if (!this.status) return 'ready';
		if (this.status.starting) return 'starting';
		return this.status.models.find((m) => m.id === model)?.state ?? 'unavailable';
	}

	/** Requests the gateway has running on ``model``'s workers now. */
	inFlight(model: string): number {
		return this.status?.models.find((m) => m.id === model)?.in_flight ?? 0;
	}

	async refresh(): Promise<void> {
		await Promise.allSettled([this.refreshStatus(), this.refreshUsage()]);
	}

	/** The models come with their state from /api/status, not from /v1/models: polling
	 * that would write an audit record (it is the OpenAI API) every few seconds. */
	async refreshStatus(): Promise<void> {
		this.status = await getStatus();
		const ids = this.status.models.map((m) => m.id);
		if (ids.join('\n') !== this.models.join('\n')) this.models = ids;
	}

	async refreshUsage(): Promise<void> {
		try {
			this.usage = await getUsage();
		} catch {
			this.usage = null; // the quota line disappears rather than showing stale numbers
		}
	}

	start(): void {
		if (this.#timer) return;
		void this.refresh();
		this.#timer = setInterval(() => {
			if (document.visibilityState === 'visible') void this.refresh();
		}, POLL_MS);
	}

	stop(): void {
		if (this.#timer) clearInterval(this.#timer);
		this.#timer = null;
	}
}

export const status = new StatusStore();
