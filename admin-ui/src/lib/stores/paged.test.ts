import { describe, expect, it } from 'vitest';
import { Paged } from './paged.svelte';

describe('Paged', () => {
	it('loads page after page by cursor, and starts over on reload', async () => {
		const pages: Record<string, { items: number[]; next_cursor: string | null }> = {
			'': { items: [1, 2], next_cursor: 'a' },
			a: { items: [3], next_cursor: null }
		};
		const asked: (string | null)[] = [];
		const list = new Paged<number>(async (after) => {
			asked.push(after);
			return pages[after ?? '']!;
		});
		await list.reload();
		expect(list.items).toEqual([1, 2]);
		await list.more();
		expect(list.items).toEqual([1, 2, 3]);
		expect(list.next).toBeNull();
		await list.more(); // nothing more to ask
		await list.reload();
		expect(list.items).toEqual([1, 2]);
		expect(asked).toEqual([null, 'a', null]);
	});

	it('drops an answer that arrives after a newer reload', async () => {
		let release: (() => void) | undefined;
		let call = 0;
		const list = new Paged<string>(async () => {
			call += 1;
			if (call === 1) {
				await new Promise<void>((resolve) => (release = resolve));
				return { items: ['old'] };
			}
			return { items: ['new'] };
		});
		const first = list.reload();
		await list.reload();
		release?.();
		await first;
		expect(list.items).toEqual(['new']);
	});

	it('keeps the error to show', async () => {
		const list = new Paged<number>(async () => {
			throw new Error('admins only');
		});
		await list.reload();
		expect(list.error).toBe('admins only');
		expect(list.loading).toBe(false);
	});
});
