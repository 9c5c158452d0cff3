import { describe, expect, it } from 'vitest';
import {
	extractObject,
	formFields,
	initialValues,
	reportFileName,
	reportFrom,
	reportJson,
	templateProblem
} from './report';

const NCR = {
	type: 'object',
	required: ['part_number', 'defect'],
	properties: {
		part_number: { type: 'string', title: 'Part number', maxLength: 40 },
		defect: { type: 'string', description: 'What is wrong' },
		severity: { type: 'string', enum: ['minor', 'major', 'critical'] },
		quantity: { type: 'integer' },
		deviation_mm: { type: 'number' },
		contained: { type: 'boolean' },
		actions: { type: 'array', items: { type: 'string' } },
		measurements: { type: 'object' }
	}
};

describe('formFields', () => {
	it('turns each property into a field of the right kind, in order', () => {
		const fields = formFields(NCR);
		expect(fields.map((f) => [f.name, f.kind, f.required])).toEqual([
			['part_number', 'text', true],
			['defect', 'long', true],
			['severity', 'choice', false],
			['quantity', 'integer', false],
			['deviation_mm', 'number', false],
			['contained', 'boolean', false],
			['actions', 'list', false],
			['measurements', 'json', false]
		]);
		expect(fields[0]?.label).toBe('Part number');
		expect(fields[1]?.description).toBe('What is wrong');
		expect(fields[2]?.options).toEqual(['minor', 'major', 'critical']);
	});

	it('gives nothing for what is not an object schema', () => {
		expect(formFields(null)).toEqual([]);
		expect(formFields({ type: 'object' })).toEqual([]);
		expect(formFields([1, 2])).toEqual([]);
	});
});

describe('extractObject', () => {
	it('finds the object in a fence, amid prose, or bare', () => {
		expect(extractObject('{"a": 1}')).toEqual({ a: 1 });
		expect(extractObject('Here it is:\n```json\n{"a": "x}"}\n```\nDone.')).toEqual({ a: 'x}' });
		expect(extractObject('x {not json} then {"b": {"c": [1]}}')).toEqual({ b: { c: [1] } });
	});

	it('gives null when there is none', () => {
		expect(extractObject('no braces here')).toBeNull();
		expect(extractObject('{"unterminated": 1')).toBeNull();
		expect(extractObject('{"a": } and {b: 1}')).toBeNull();
	});
});

describe('the form round trip', () => {
	const fields = formFields(NCR);

	it('fills the inputs from the answer and types the report back', () => {
		const answer = {
			part_number: 'A-113',
			defect: 'burr on edge',
			severity: 'major',
			quantity: 12,
			contained: true,
			actions: ['deburr', 'inspect lot'],
			measurements: { x: 1 }
		};
		const values = initialValues(fields, answer);
		expect(values.actions).toBe('deburr\ninspect lot');
		expect(values.contained).toBe(true);
		const { report, problems } = reportFrom(fields, values);
		expect(problems).toEqual([]);
		expect(report).toEqual(answer);
	});

	it('drops what the schema does not allow and names what is missing or wrong', () => {
		const values = initialValues(fields, { severity: 'catastrophic', quantity: 'many' });
		expect(values.severity).toBe('');
		const { problems } = reportFrom(fields, { ...values, quantity: '1.5', deviation_mm: 'abc' });
		expect(problems).toEqual([
			'Part number is required.',
			'defect is required.',
			'quantity: not a whole number.',
			'deviation_mm: not a number.'
		]);
	});

	it('writes the report as JSON with a dated file name', () => {
		expect(JSON.parse(reportJson({ a: 1 }))).toEqual({ a: 1 });
		expect(reportFileName('quality-ncr', new Date('2026-12-03T10:00:00Z'))).toBe(
			'quality-ncr-report-2026-12-03.json'
		);
		expect(reportFileName('../../etc')).toMatch(/^etc-report-/);
	});
});

describe('templateProblem', () => {
	it('accepts an object schema with properties, and empty text (no template)', () => {
		expect(templateProblem(JSON.stringify(NCR))).toBeNull();
		expect(templateProblem('  ')).toBeNull();
	});

	it('says what is wrong otherwise', () => {
		expect(templateProblem('{')).toMatch(/not valid JSON/);
		expect(templateProblem('[]')).toMatch(/JSON object/);
		expect(templateProblem('{"type": "string"}')).toMatch(/"object"/);
		expect(templateProblem('{"type": "object", "properties": {}}')).toMatch(/properties/);
	});
});
