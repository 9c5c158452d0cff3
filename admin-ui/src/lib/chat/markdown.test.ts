import { describe, expect, it } from 'vitest';
import { renderMarkdown } from './markdown';

function dom(html: string): HTMLElement {
	const root = document.createElement('div');
	root.innerHTML = html;
	return root;
}

describe('renderMarkdown', () => {
	it('renders emphasis, lists and tables', () => {
		const root = dom(renderMarkdown('**bold**\n\n- a\n- b\n\n| x | y |\n|---|---|\n| 1 | 2 |'));
		expect(root.querySelector('strong')?.textContent).toBe('bold');
		expect(root.querySelectorAll('li')).toHaveLength(2);
		expect(root.querySelector('td')?.textContent).toBe('1');
	});

	it('highlights a fenced block and gives it a copy button', () => {
		const root = dom(renderMarkdown('```python\ndef f():\n    return 1\n```'));
		expect(root.querySelector('.code-lang')?.textContent).toBe('python');
		expect(root.querySelector('code .hljs-keyword')?.textContent).toBe('def');
		expect(root.querySelector('button[data-copy-code]')).not.toBeNull();
		expect(root.querySelector('code')?.textContent).toBe('def f():\n    return 1');
	});

	it('shows raw HTML as text and keeps nothing that could run', () => {
		const evil =
			'<script>alert(1)</script><img src=x onerror=alert(2)>\n\n[x](javascript:alert(3)) ' +
			'<a href="https://e.test" onclick="alert(4)">y</a>';
		const html = renderMarkdown(evil);
		const root = dom(html);
		expect(root.querySelector('script, img, [onerror], [onclick]')).toBeNull();
		expect(root.textContent).toContain('<script>alert(1)</script>');
		expect(html).not.toMatch(/href="javascript:/i);
	});

	it('opens links in a new tab without the opener', () => {
		const link = dom(renderMarkdown('[docs](https://example.test/a)')).querySelector('a');
		expect(link?.getAttribute('href')).toBe('https://example.test/a');
		expect(link?.getAttribute('rel')).toBe('noopener noreferrer');
		expect(link?.getAttribute('target')).toBe('_blank');
	});

	it('escapes code in an unknown language', () => {
		const root = dom(renderMarkdown('```nosuchlang\n<b>x</b>\n```'));
		expect(root.querySelector('code b')).toBeNull();
		expect(root.querySelector('code')?.textContent).toBe('<b>x</b>');
	});
});
