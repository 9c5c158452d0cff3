/**
 * One server-paginated list (keyset: each page names the cursor of the next): the admin
 * tables all use it, so none of them ever loads a whole table.
 */
export interface Page<T> {
	items: T[];
	next_cursor?: string | null;
}

export class Paged<T> {
	items = $state<T[]>([]);
	next = $state<string | null>(null);
	loading = $state(false);
	error = $state<string | null>(null);
	#turn = 0;

	constructor(private readonly fetchPage: (after: string | null) => Promise<Page<T>>) {}

	/** The first page again (after a filter changed); an older answer arriving late is dropped. */
	async reload(): Promise<void> {
		const turn = ++this.#turn;
		this.loading = true;
		try {
			const page = await this.fetchPage(null);
			if (turn !== this.#turn) return;
			this.items = page.items;
			this.next = page.next_cursor ?? null;
			this.error = null;
		} catch (error) {
			if (turn === this.#turn) this.error = (error as Error).message;
		} finally {
			if (turn === this.#turn) this.loading = false;
		}
	}

	async more(): Promise<void> {
		if (!this.next || this.loading) return;
		const turn = this.#turn;
		this.loading = true;
		try {
			const page = await this.fetchPage(this.next);
			if (turn !== this.#turn) return;
			this.items = [...this.items, ...page.items];
			this.next = page.next_cursor ?? null;
		} catch (error) {
			this.error = (error as Error).message;
		} finally {
			if (turn === this.#turn) this.loading = false;
		}
	}

	/** Put a changed row in place (matched by ``same``), keeping the order. */
	replace(row: T, same: (a: T, b: T) => boolean): void {
		this.items = this.items.map((item) => (same(item, row) ? row : item));
	}
}
