/** The sidebar's list: the user's conversations, newest first, a page at a time; search. */
import {
	deleteConversation,
	listConversations,
	searchConversations,
	updateConversation,
	type Conversation,
	type SearchHit
} from '$lib/services/conversations';

class ConversationsStore {
	items = $state<Conversation[]>([]);
	next = $state<string | null>(null);
	loading = $state(false);
	query = $state('');
	hits = $state<SearchHit[] | null>(null);
	error = $state<string | null>(null);
	#searchTurn = 0;

	async refresh(): Promise<void> {
		this.loading = true;
		try {
			const page = await listConversations(null);
			this.items = page.items;
			this.next = page.next_cursor ?? null;
			this.error = null;
		} catch (error) {
			this.error = (error as Error).message;
		} finally {
			this.loading = false;
		}
	}

	async more(): Promise<void> {
		if (!this.next || this.loading) return;
		this.loading = true;
		try {
			const page = await listConversations(this.next);
			const known = new Set(this.items.map((c) => c.id));
			this.items = [...this.items, ...page.items.filter((c) => !known.has(c.id))];
			this.next = page.next_cursor ?? null;
		} finally {
			this.loading = false;
		}
	}

	/** Search as the user types; an answer that arrives after a newer query is dropped. */
	async search(query: string): Promise<void> {
		this.query = query;
		const turn = ++this.#searchTurn;
		if (!query.trim()) {
			this.hits = null;
			return;
		}
		const hits = await searchConversations(query.trim());
		if (turn === this.#searchTurn) this.hits = hits;
	}

	/** A conversation was created or changed: it moves to the top. */
	touched(conversation: Conversation): void {
		this.items = [conversation, ...this.items.filter((c) => c.id !== conversation.id)];
	}

	async rename(id: string, title: string): Promise<void> {
		this.touched(await updateConversation(id, { title }));
	}

	async remove(id: string): Promise<void> {
		await deleteConversation(id);
		this.items = this.items.filter((c) => c.id !== id);
		if (this.hits) this.hits = this.hits.filter((h) => h.conversation_id !== id);
	}
}

export const conversations = new ConversationsStore();
