import { sveltekit } from '@sveltejs/kit/vite';
import { defineConfig } from 'vitest/config';

export default defineConfig({
	plugins: [sveltekit()],
	build: { sourcemap: false, chunkSizeWarningLimit: 600 },
	// `npm run dev` against a gateway on :8000 (make run): the API paths go there.
	server: {
		proxy: Object.fromEntries(
			['/api', '/auth', '/v1', '/schema'].map((p) => [p, 'http://127.0.0.1:8000'])
		)
	},
	test: {
		include: ['src/**/*.test.ts'],
		environment: 'jsdom'
	}
});
