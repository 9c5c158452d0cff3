/**
 * An assistant's response template (a JSON Schema of an object) as a form: the fields to
 * show, the values the model's answer gives them, and the report the filled form exports.
 *
 * The model is asked for one JSON object (gateway/domain/assistants/prompt.py); a small
 * model may wrap it in prose or a code fence, or not manage at all. So the answer is read
 * leniently (the first JSON object found in it), and every field stays editable: the
 * person filling the report has the last word.
 */

export type FieldKind = 'text' | 'long' | 'number' | 'integer' | 'boolean' | 'choice' | 'list' | 'json';

export interface Field {
	name: string;
	label: string;
	kind: FieldKind;
	required: boolean;
	description: string | null;
	options: string[];
}

export type Values = Record<string, string | boolean>;
export type Report = Record<string, unknown>;

type Schema = Record<string, unknown>;

const isObject = (value: unknown): value is Schema =>
	typeof value === 'object' && value !== null && !Array.isArray(value);

/** The schema's top-level properties as form fields, in the schema's order. */
export function formFields(schema: unknown): Field[] {
	if (!isObject(schema) || !isObject(schema.properties)) return [];
	const required = new Set(Array.isArray(schema.required) ? schema.required.map(String) : []);
	return Object.entries(schema.properties).map(([name, raw]) => {
		const property = isObject(raw) ? raw : {};
		const title = typeof property.title === 'string' && property.title.trim() ? property.title : name;
		return {
			name,
			label: title,
			kind: kindOf(property),
			required: required.has(name),
			description: typeof property.description === 'string' ? property.description : null,
			options: Array.isArray(property.enum) ? property.enum.map(String) : []
		};
	});
}

function kindOf(property: Schema): FieldKind {
	if (Array.isArray(property.enum) && property.enum.length > 0) return 'choice';
	const type = Array.isArray(property.type) ? property.type.find((t) => t !== 'null') : property.type;
	switch (type) {
		case 'string':
			return typeof property.maxLength === 'number' && property.maxLength <= 200 ? 'text' : 'long';
		case 'number':
			return 'number';
		case 'integer':
			return 'integer';
		case 'boolean':
			return 'boolean';
		case 'array':
			return isObject(property.items) && property.items.type === 'string' ? 'list' : 'json';
		default:
			return 'json';
	}
}

/** The first JSON object in ``text`` (bare, in a code fence, or amid prose), or null. */
export function extractObject(text: string): Report | null {
	for (let start = text.indexOf('{'); start !== -1; start = text.indexOf('{', start + 1)) {
		const end = closingBrace(text, start);
		if (end === -1) continue;
		try {
			const value: unknown = JSON.parse(text.slice(start, end + 1));
			if (isObject(value)) return value;
		} catch {
			// not JSON from here: try the next brace
		}
	}
	return null;
}

/** The index of the brace closing the one at ``start`` (strings skipped), or -1. */
function closingBrace(text: string, start: number): number {
	let depth = 0;
	let inString = false;
	for (let i = start; i < text.length; i++) {
		const c = text[i];
		if (inString) {
			if (c === '\\') i++;
			else if (c === '"') inString = false;
		} else if (c === '"') inString = true;
		else if (c === '{') depth++;
		else if (c === '}' && --depth === 0) return i;
	}
	return -1;
}

/** The form's starting values: what the answer gave each field, as the inputs hold it. */
export function initialValues(fields: Field[], answer: Report | null): Values {
	const values: Values = {};
	for (const field of fields) {
		const given = answer?.[field.name];
		values[field.name] = asInput(field, given);
	}
	return values;
}

function asInput(field: Field, given: unknown): string | boolean {
	if (field.kind === 'boolean') return given === true || given === 'true';
	if (given === undefined || given === null) return '';
	if (field.kind === 'list' && Array.isArray(given)) return given.map(String).join('\n');
	if (field.kind === 'json') return JSON.stringify(given, null, 1);
	if (field.kind === 'choice') return field.options.includes(String(given)) ? String(given) : '';
	return typeof given === 'object' ? JSON.stringify(given) : String(given);
}

/** The report the form holds, typed as the schema says, and what is wrong with it. */
export function reportFrom(fields: Field[], values: Values): { report: Report; problems: string[] } {
	const report: Report = {};
	const problems: string[] = [];
	for (const field of fields) {
		const raw = values[field.name];
		if (field.kind === 'boolean') {
			report[field.name] = raw === true;
			continue;
		}
		const text = typeof raw === 'string' ? raw.trim() : '';
		if (text === '') {
			if (field.required) problems.push(`${field.label} is required.`);
			continue;
		}
		const typed = typedValue(field, text);
		if (typed instanceof Error) problems.push(`${field.label}: ${typed.message}`);
		else report[field.name] = typed;
	}
	return { report, problems };
}

function typedValue(field: Field, text: string): unknown {
	switch (field.kind) {
		case 'number':
		case 'integer': {
			const number = Number(text);
			if (!Number.isFinite(number)) return new Error('not a number.');
			if (field.kind === 'integer' && !Number.isInteger(number)) return new Error('not a whole number.');
			return number;
		}
		case 'list':
			return text
				.split('\n')
				.map((line) => line.trim())
				.filter(Boolean);
		case 'json':
			try {
				return JSON.parse(text);
			} catch {
				return new Error('not valid JSON.');
			}
		case 'choice':
			return field.options.includes(text) ? text : new Error(`must be one of ${field.options.join(', ')}.`);
		default:
			return text;
	}
}

/** The report as a JSON file's text. */
export function reportJson(report: Report): string {
	return `${JSON.stringify(report, null, 2)}\n`;
}

/** A file name for an assistant's report: ``<slug>-report-<YYYY-MM-DD>.json``. */
export function reportFileName(slug: string, when: Date = new Date()): string {
	const safe = slug.replace(/[^a-z0-9-]/gi, '') || 'assistant';
	return `${safe}-report-${when.toISOString().slice(0, 10)}.json`;
}

/** What is wrong with a template an admin typed, or null when it can be used. */
export function templateProblem(text: string): string | null {
	if (!text.trim()) return null;
	let value: unknown;
	try {
		value = JSON.parse(text);
	} catch (error) {
		return `not valid JSON: ${(error as Error).message}`;
	}
	if (!isObject(value)) return 'the template must be a JSON object (a JSON Schema).';
	if (value.type !== 'object') return 'the template\'s "type" must be "object".';
	if (!isObject(value.properties) || Object.keys(value.properties).length === 0) {
		return 'the template needs "properties": the fields of the report.';
	}
	return null;
}
