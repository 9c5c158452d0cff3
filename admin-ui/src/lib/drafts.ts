/**
 * What the user has typed but not sent, per conversation, kept in this tab's
 * sessionStorage: a session that expires mid-sentence (sign-in, even through the IdP's
 * pages, happens in the same tab) finds the text again. Cleared on sign-out.
 */
const PREFIX = 'enclave.draft.';
const RETURN_TO = 'enclave.returnTo';

function storage(): Storage | null {
	try {
		return typeof sessionStorage === 'undefined' ? null : sessionStorage;
	} catch {
		return null; // storage disabled by the browser's settings
	}
}

export function keyFor(conversationId: string | null): string {
	return PREFIX + (conversationId ?? 'new');
}

export function loadDraft(conversationId: string | null): string {
	return storage()?.getItem(keyFor(conversationId)) ?? '';
}

export function saveDraft(conversationId: string | null, text: string): void {
	const store = storage();
	if (!store) return;
	if (text) store.setItem(keyFor(conversationId), text);
	else store.removeItem(keyFor(conversationId));
}

export function forgetAll(): void {
	const store = storage();
	if (!store) return;
	for (const key of Object.keys(store)) if (key.startsWith(PREFIX)) store.removeItem(key);
	store.removeItem(RETURN_TO);
}

/** Where to go back to after signing in again (a path of this app, never another site). */
export function rememberReturn(path: string): void {
	if (path.startsWith('/') && !path.startsWith('//')) storage()?.setItem(RETURN_TO, path);
}

export function takeReturn(): string | null {
	const store = storage();
	const path = store?.getItem(RETURN_TO) ?? null;
	store?.removeItem(RETURN_TO);
	return path && path.startsWith('/') && !path.startsWith('//') && path !== '/signin' ? path : null;
}
