import { beforeEach, describe, expect, it } from 'vitest';
import { forgetAll, loadDraft, rememberReturn, saveDraft, takeReturn } from './drafts';

describe('drafts', () => {
	beforeEach(() => sessionStorage.clear());

	it('keeps a draft per conversation until it is emptied', () => {
		saveDraft('c1', 'half a thought');
		saveDraft(null, 'a new chat');
		expect(loadDraft('c1')).toBe('half a thought');
		expect(loadDraft(null)).toBe('a new chat');
		saveDraft('c1', '');
		expect(loadDraft('c1')).toBe('');
	});

	it('forgets every draft on sign-out', () => {
		saveDraft('c1', 'x');
		rememberReturn('/c/c1');
		forgetAll();
		expect(loadDraft('c1')).toBe('');
		expect(takeReturn()).toBeNull();
	});

	it('returns only to a path of this app, once', () => {
		rememberReturn('/c/abc');
		expect(takeReturn()).toBe('/c/abc');
		expect(takeReturn()).toBeNull();
		rememberReturn('//evil.test/x');
		rememberReturn('https://evil.test');
		expect(takeReturn()).toBeNull();
	});
});
