import adapter from '@sveltejs/adapter-static';

/** @type {import('@sveltejs/kit').Config} */
export default {
	kit: {
		// A single-page app: every route renders in the browser, and the gateway answers
		// any path it does not own with index.html (the fallback below).
		adapter: adapter({ pages: 'build', assets: 'build', fallback: 'index.html', strict: true }),
		// The gateway's own paths; the app never routes there.
		alias: { $api: 'src/lib/api' },
		version: { pollInterval: 0 }
	}
};
