import { describe, expect, it } from 'vitest';
import { inComposer, pageWide, type Keys } from './shortcuts';

const press = (key: string, mods: Partial<Keys> = {}): Keys => ({
	key,
	shiftKey: false,
	ctrlKey: false,
	metaKey: false,
	altKey: false,
	isComposing: false,
	...mods
});

describe('shortcuts', () => {
	it('sends on Enter, not on Shift+Enter or while composing', () => {
		expect(inComposer(press('Enter'))).toBe('send');
		expect(inComposer(press('Enter', { shiftKey: true }))).toBeNull();
		expect(inComposer(press('Enter', { isComposing: true }))).toBeNull();
	});

	it('stops on Esc and opens a new chat on Ctrl+Shift+O (or Cmd)', () => {
		expect(pageWide(press('Escape'))).toBe('stop');
		expect(pageWide(press('O', { ctrlKey: true, shiftKey: true }))).toBe('new-chat');
		expect(pageWide(press('o', { metaKey: true, shiftKey: true }))).toBe('new-chat');
		expect(pageWide(press('o', { ctrlKey: true }))).toBeNull();
		expect(pageWide(press('a'))).toBeNull();
	});
});
