// A single-page app: nothing renders on a server, and the gateway answers every app path
// with index.html (svelte.config.js's fallback).
export const ssr = false;
export const prerender = false;
