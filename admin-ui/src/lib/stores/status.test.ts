import { describe, expect, it, vi } from 'vitest';
import { status } from './status.svelte';

describe('status', () => {
	it('says ready until the gateway has answered, then what it reports', () => {
		status.status = null;
		expect(status.stateOf('tiny')).toBe('ready');
		status.status = { starting: true, models: [] };
		expect(status.stateOf('tiny')).toBe('starting');
		status.status = {
			starting: false,
			models: [
				{ id: 'tiny', state: 'loading', in_flight: 0 },
				{ id: 'big', state: 'ready', in_flight: 3 }
			]
		};
		expect(status.stateOf('tiny')).toBe('loading');
		expect(status.stateOf('big')).toBe('ready');
		expect(status.inFlight('big')).toBe(3);
		expect(status.stateOf('gone')).toBe('unavailable');
		expect(status.inFlight('gone')).toBe(0);
	});
});

describe('status models', () => {
	it('lists the models /api/status names, without asking /v1/models', async () => {
		const asked: string[] = [];
		vi.stubGlobal('fetch', async (input: RequestInfo | URL) => {
			const url = input instanceof Request ? input.url : String(input);
			asked.push(new URL(url).pathname);
			const body = { starting: false, models: [{ id: 'tiny', state: 'ready', in_flight: 0 }] };
			return new Response(JSON.stringify(body), { headers: { 'content-type': 'application/json' } });
		});
		vi.resetModules(); // the API client takes fetch when it is made
		try {
			const fresh = (await import('./status.svelte')).status;
			await fresh.refreshStatus();
			expect(fresh.models).toEqual(['tiny']);
		} finally {
			vi.unstubAllGlobals();
		}
		expect(asked).toEqual(['/api/status']);
	});
});
