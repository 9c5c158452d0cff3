import { describe, expect, it } from 'vitest';
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
