/** Who is signed in; signing in with the break-glass account; signing out. */
import { api, type Schemas } from '$lib/api/client';
import { ApiFailure, unwrap } from '$lib/api/errors';

export type Me = Schemas['MeRead'];

/** The signed-in user, or null when there is no session (401). */
export async function whoAmI(): Promise<Me | null> {
	try {
		return unwrap(await api.GET('/api/me'));
	} catch (error) {
		if (error instanceof ApiFailure && error.status === 401) return null;
		throw error;
	}
}

export async function signInLocal(email: string, password: string): Promise<void> {
	unwrap(await api.POST('/auth/local/login', { body: { email, password } }));
}

/** Ends the session; returns where the browser goes next (the IdP's sign-out, or /). */
export async function signOut(): Promise<string> {
	return unwrap(await api.POST('/auth/logout')).redirect;
}

/** The SSO sign-in starts with a top-level navigation: the gateway redirects to the IdP. */
export const SSO_URL = '/auth/login';

export async function signInMethods(): Promise<Schemas['SignInMethods']> {
	return unwrap(await api.GET('/auth/methods'));
}
