/** A refused or failed call, with the message the gateway gave (its two error shapes). */
export class ApiFailure extends Error {
	constructor(
		readonly status: number,
		message: string,
		readonly code: string | null = null,
		readonly headers: Headers = new Headers()
	) {
		super(message);
		this.name = 'ApiFailure';
	}
}

/** The message in an OpenAI error body ({error: {message}}) or Litestar's ({detail}). */
export function messageOf(body: unknown, status: number): { message: string; code: string | null } {
	if (body && typeof body === 'object') {
		const error = (body as { error?: unknown }).error;
		if (error && typeof error === 'object') {
			const { message, code } = error as { message?: unknown; code?: unknown };
			if (typeof message === 'string') {
				return { message, code: typeof code === 'string' ? code : null };
			}
		}
		const detail = (body as { detail?: unknown }).detail;
		if (typeof detail === 'string') return { message: detail, code: null };
	}
	return { message: `the gateway answered ${status}`, code: null };
}

/** Unwrap an openapi-fetch result: its data, or an ApiFailure. */
export function unwrap<T>(result: { data?: T; error?: unknown; response: Response }): T {
	if (result.response.ok && result.data !== undefined) return result.data;
	if (result.response.ok && result.response.status === 204) return undefined as T;
	const { message, code } = messageOf(result.error, result.response.status);
	throw new ApiFailure(result.response.status, message, code, result.response.headers);
}
