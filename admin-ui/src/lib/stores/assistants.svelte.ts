/**
 * The assistants the signed-in person's department offers (loaded with the session, and
 * again when a conversation names one not seen yet).
 */
import { listAssistants, type AssistantCard } from '$lib/services/assistants';

class AssistantsStore {
	items = $state<AssistantCard[]>([]);
	loaded = $state(false);

	async refresh(): Promise<void> {
		try {
			this.items = await listAssistants();
		} catch {
			this.items = []; // the chat works without them
		} finally {
			this.loaded = true;
		}
	}

	byId(id: string | null | undefined): AssistantCard | null {
		return this.items.find((a) => a.id === id) ?? null;
	}

	/** The department's default assistant, if it has one. */
	get preferred(): AssistantCard | null {
		return this.items.find((a) => a.is_default) ?? null;
	}
}

export const assistants = new AssistantsStore();
