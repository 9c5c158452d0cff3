/** The assistant editor's inputs: sampling defaults typed in as text, checked and typed. */

export interface Sampling {
	temperature?: number | null;
	top_p?: number | null;
	max_tokens?: number | null;
}

export type SamplingTexts = Record<keyof Sampling, string>;

const RANGES: Record<keyof Sampling, [number, number, boolean, string]> = {
	temperature: [0, 2, false, 'Temperature'],
	top_p: [Number.MIN_VALUE, 1, false, 'Top-p'],
	max_tokens: [1, 2 ** 31 - 1, true, 'Max tokens']
};

export const SAMPLING_FIELDS = Object.keys(RANGES) as (keyof Sampling)[];

export function samplingLabel(field: keyof Sampling): string {
	return RANGES[field][3];
}

export function samplingTexts(sampling: Sampling | null | undefined): SamplingTexts {
	const text = (value: number | null | undefined) => (value === undefined || value === null ? '' : String(value));
	return {
		temperature: text(sampling?.temperature),
		top_p: text(sampling?.top_p),
		max_tokens: text(sampling?.max_tokens)
	};
}

/** The typed sampling defaults (null: none set), or the problems with what was typed. */
export function parseSampling(texts: SamplingTexts): { sampling: Sampling | null; problems: string[] } {
	const sampling: Sampling = {};
	const problems: string[] = [];
	for (const field of SAMPLING_FIELDS) {
		const text = texts[field].trim();
		if (!text) continue;
		const [low, high, integer, label] = RANGES[field];
		const value = Number(text);
		if (!Number.isFinite(value) || (integer && !Number.isInteger(value)) || value < low || value > high) {
			const range = field === 'top_p' ? 'above 0 and at most 1' : `from ${low} to ${high.toLocaleString('en-US')}`;
			problems.push(`${label} must be ${integer ? 'a whole number ' : 'a number '}${range}.`);
			continue;
		}
		sampling[field] = value;
	}
	return { sampling: Object.keys(sampling).length ? sampling : null, problems };
}

/** A slug from a name, as the gateway would derive it: "Quality NCR" -> "quality-ncr". */
export function slugFrom(name: string): string {
	return name
		.toLowerCase()
		.normalize('NFKD')
		.replace(/[\u0300-\u036f]/g, '')
		.replace(/[^a-z0-9]+/g, '-')
		.replace(/^-+|-+$/g, '')
		.slice(0, 63);
}
