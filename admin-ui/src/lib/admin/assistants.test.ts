import { describe, expect, it } from 'vitest';
import { parseSampling, samplingTexts, slugFrom } from './assistants';

describe('sampling defaults', () => {
	it('types what is filled in and leaves the rest out', () => {
		expect(parseSampling({ temperature: '0.2', top_p: '', max_tokens: '512' })).toEqual({
			sampling: { temperature: 0.2, max_tokens: 512 },
			problems: []
		});
		expect(parseSampling(samplingTexts(null))).toEqual({ sampling: null, problems: [] });
		expect(samplingTexts({ top_p: 0.9 }).top_p).toBe('0.9');
	});

	it('names each value out of range', () => {
		const { problems } = parseSampling({ temperature: '3', top_p: '0', max_tokens: '1.5' });
		expect(problems).toEqual([
			'Temperature must be a number from 0 to 2.',
			'Top-p must be a number above 0 and at most 1.',
			'Max tokens must be a whole number from 1 to 2,147,483,647.'
		]);
	});
});

describe('slugFrom', () => {
	it('makes a lowercase dashed slug', () => {
		expect(slugFrom('  Quality NCR — Line 3 ')).toBe('quality-ncr-line-3');
		expect(slugFrom('Ünïcödé')).toBe('unicode');
		expect(slugFrom('x'.repeat(100))).toHaveLength(63);
	});
});
