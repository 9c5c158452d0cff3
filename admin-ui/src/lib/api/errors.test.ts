import { describe, expect, it } from 'vitest';
import { ApiFailure, messageOf, unwrap } from './errors';

describe('errors', () => {
	it("reads OpenAI's error body and Litestar's", () => {
		expect(messageOf({ error: { message: 'no', code: 'rate_limit_exceeded' } }, 429)).toEqual({
			message: 'no',
			code: 'rate_limit_exceeded'
		});
		expect(messageOf({ status_code: 404, detail: 'not found' }, 404).message).toBe('not found');
		expect(messageOf('<html>', 502).message).toBe('the gateway answered 502');
	});

	it('unwraps data, or throws the failure with its status', () => {
		const ok = new Response('{}', { status: 200 });
		expect(unwrap({ data: { a: 1 }, response: ok })).toEqual({ a: 1 });
		const refused = new Response('', { status: 403 });
		const failure = (() => {
			try {
				unwrap({ error: { detail: 'admins only' }, response: refused });
			} catch (error) {
				return error;
			}
		})();
		expect(failure).toBeInstanceOf(ApiFailure);
		expect((failure as ApiFailure).status).toBe(403);
		expect((failure as ApiFailure).message).toBe('admins only');
	});
});
