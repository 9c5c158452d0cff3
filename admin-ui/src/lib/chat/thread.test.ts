import { describe, expect, it } from 'vitest';
import { planEdit, planRegenerate, planSend, titleFrom, type Turn } from './thread';

const turns: Turn[] = [
	{ role: 'user', content: 'Q1', position: 0 },
	{ role: 'assistant', content: 'A1', position: 1 },
	{ role: 'user', content: 'Q2', position: 2 },
	{ role: 'assistant', content: 'A2', position: 3 }
];

describe('planSend', () => {
	it('sends the system prompt, the thread and the new message', () => {
		const plan = planSend('Be brief.', turns, 'Q3');
		expect(plan.truncateFrom).toBeNull();
		expect(plan.userMessage).toBe('Q3');
		expect(plan.request.map((m) => m.content)).toEqual(['Be brief.', 'Q1', 'A1', 'Q2', 'A2', 'Q3']);
		expect(plan.request[0]?.role).toBe('system');
	});

	it('leaves out an empty system prompt', () => {
		expect(planSend('  ', [], 'hi').request).toEqual([{ role: 'user', content: 'hi' }]);
	});
});

describe('planRegenerate', () => {
	it('drops the last answer and asks again', () => {
		const plan = planRegenerate('', turns);
		expect(plan?.truncateFrom).toBe(3);
		expect(plan?.userMessage).toBeNull();
		expect(plan?.request.map((m) => m.content)).toEqual(['Q1', 'A1', 'Q2']);
	});

	it('answers a last user message that has no answer (a stopped or failed one)', () => {
		const plan = planRegenerate('', turns.slice(0, 3));
		expect(plan?.truncateFrom).toBeNull();
		expect(plan?.request.at(-1)?.content).toBe('Q2');
	});

	it('has nothing to regenerate in an empty conversation', () => {
		expect(planRegenerate('', [])).toBeNull();
	});
});

describe('planEdit', () => {
	it('cuts from the edited message and asks with the new text', () => {
		const plan = planEdit('sys', turns, 0, 'Q1 again');
		expect(plan?.truncateFrom).toBe(0);
		expect(plan?.userMessage).toBe('Q1 again');
		expect(plan?.request.map((m) => m.content)).toEqual(['sys', 'Q1 again']);
	});

	it('refuses to edit an answer or a position that is not there', () => {
		expect(planEdit('', turns, 1, 'x')).toBeNull();
		expect(planEdit('', turns, 9, 'x')).toBeNull();
	});
});

describe('titleFrom', () => {
	it('takes the first line, shortened', () => {
		expect(titleFrom('  Hello there\nmore')).toBe('Hello there');
		expect(titleFrom('x'.repeat(80))).toHaveLength(60);
		expect(titleFrom('   ')).toBe('New chat');
	});
});
