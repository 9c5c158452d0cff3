/** The signed-in user (or none), shared by every view; a 401 anywhere ends it here. */
import { goto } from '$app/navigation';
import { onUnauthorized, setCsrfToken } from '$lib/api/client';
import { forgetAll, rememberReturn } from '$lib/drafts';
import { signInLocal, signOut, whoAmI, type Me } from '$lib/services/session';

class SessionStore {
	me = $state<Me | null>(null);
	/** False until the first /api/me has answered. */
	checked = $state(false);
	/** Set when a session ended under the user (shown on the sign-in page). */
	expired = $state(false);

	get signedIn(): boolean {
		return this.me !== null && this.me.kind === 'user';
	}

	get isAdmin(): boolean {
		return this.me?.user?.role === 'admin';
	}

	async load(): Promise<void> {
		this.me = await whoAmI();
		setCsrfToken(this.me?.csrf_token);
		this.checked = true;
	}

	async signIn(email: string, password: string): Promise<void> {
		await signInLocal(email, password);
		this.expired = false;
		await this.load();
	}

	async signOut(): Promise<void> {
		const next = await signOut();
		forgetAll();
		this.me = null;
		setCsrfToken(null);
		window.location.assign(next);
	}

	/** The gateway answered 401: keep the place (drafts are already kept) and sign in. */
	async ended(): Promise<void> {
		if (!this.me) return;
		this.me = null;
		this.expired = true;
		setCsrfToken(null);
		rememberReturn(window.location.pathname);
		await goto('/signin');
	}
}

export const session = new SessionStore();
onUnauthorized(() => void session.ended());
