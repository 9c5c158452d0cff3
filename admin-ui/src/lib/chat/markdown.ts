/**
 * An answer's markdown as safe HTML: marked parses it, highlight.js colours the code
 * blocks, DOMPurify removes whatever a model (or a prompt injection) wrote that could run.
 * Raw HTML in the markdown is shown as text, never as markup. Each code block gets a copy
 * button, wired by the message component (no inline handlers: the CSP forbids them).
 */
import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import c from 'highlight.js/lib/languages/c';
import cpp from 'highlight.js/lib/languages/cpp';
import css from 'highlight.js/lib/languages/css';
import diff from 'highlight.js/lib/languages/diff';
import go from 'highlight.js/lib/languages/go';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import markdown from 'highlight.js/lib/languages/markdown';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import sql from 'highlight.js/lib/languages/sql';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';
import { Marked, type Tokens } from 'marked';

const LANGUAGES = {
	bash,
	c,
	cpp,
	css,
	diff,
	go,
	java,
	javascript,
	json,
	markdown,
	python,
	rust,
	sql,
	typescript,
	xml,
	yaml
};
for (const [name, language] of Object.entries(LANGUAGES)) hljs.registerLanguage(name, language);

export function escapeHtml(text: string): string {
	return text
		.replaceAll('&', '&amp;')
		.replaceAll('<', '&lt;')
		.replaceAll('>', '&gt;')
		.replaceAll('"', '&quot;')
		.replaceAll("'", '&#39;');
}

function highlighted(code: string, lang: string | undefined): { html: string; language: string } {
	const name = (lang ?? '').trim().split(/\s+/, 1)[0]?.toLowerCase() ?? '';
	if (name && hljs.getLanguage(name)) {
		return { html: hljs.highlight(code, { language: name, ignoreIllegals: true }).value, language: name };
	}
	return { html: escapeHtml(code), language: name };
}

const marked = new Marked({
	gfm: true,
	breaks: false,
	renderer: {
		code({ text, lang }: Tokens.Code): string {
			const { html, language } = highlighted(text, lang);
			const label = language ? `<span class="code-lang">${escapeHtml(language)}</span>` : '';
			return (
				`<div class="code-block"><div class="code-bar">${label}` +
				`<button type="button" class="copy-code" data-copy-code>Copy</button></div>` +
				`<pre><code class="hljs">${html}</code></pre></div>`
			);
		},
		html({ text }: Tokens.HTML | Tokens.Tag): string {
			return escapeHtml(text);
		}
	}
});

let hooked = false;

/** Markdown to sanitized HTML. Links open in a new tab, without the opener or referrer. */
export function renderMarkdown(source: string): string {
	if (!hooked) {
		DOMPurify.addHook('afterSanitizeAttributes', (node) => {
			if (node.tagName === 'A') {
				node.setAttribute('target', '_blank');
				node.setAttribute('rel', 'noopener noreferrer');
			}
		});
		hooked = true;
	}
	const html = marked.parse(source, { async: false });
	return DOMPurify.sanitize(html, {
		ADD_ATTR: ['target'],
		FORBID_TAGS: ['style', 'form', 'input', 'textarea', 'select', 'iframe'],
		FORBID_ATTR: ['style']
	});
}
