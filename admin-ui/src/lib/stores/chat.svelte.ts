/**
 * The open conversation and the answer being generated. Sending, regenerating and editing
 * are plans (chat/thread.ts) carried out the same way: cut the stored conversation, store
 * the user's message, stream the answer through the gateway, store the answer.
 */
import { goto } from '$app/navigation';
import { ApiFailure } from '$lib/api/errors';
import { noticeFor, type Notice } from '$lib/chat/notices';
import { planEdit, planRegenerate, planSend, titleFrom, type Plan, type Turn } from '$lib/chat/thread';
import { saveDraft } from '$lib/drafts';
import { streamAnswer } from '$lib/services/chat';
import {
	appendMessages,
	createConversation,
	getConversation,
	truncateConversation,
	updateConversation,
	type ConversationDetail
} from '$lib/services/conversations';
import { conversations } from '$lib/stores/conversations.svelte';
import { status } from '$lib/stores/status.svelte';

export type Phase = 'idle' | 'saving' | 'waiting' | 'streaming';

const LAST_MODEL = 'enclave.model';

class ChatStore {
	conversation = $state<ConversationDetail | null>(null);
	model = $state('');
	systemPrompt = $state('');
	phase = $state<Phase>('idle');
	partial = $state('');
	notice = $state<Notice | null>(null);
	loadError = $state<string | null>(null);
	/** A message that could not be stored (the composer gives it back to the user). */
	unsent = $state<string | null>(null);
	#abort: AbortController | null = null;

	get id(): string | null {
		return this.conversation?.id ?? null;
	}

	get busy(): boolean {
		return this.phase !== 'idle';
	}

	get turns(): Turn[] {
		return (this.conversation?.messages ?? []).map((m) => ({
			role: m.role === 'assistant' ? 'assistant' : 'user',
			content: m.content,
			position: m.position
		}));
	}

	/** Show conversation ``id`` (null: a new, empty one). */
	async open(id: string | null): Promise<void> {
		if (id !== null && id === this.id) return; // already open (a new chat just got its id)
		this.stop();
		this.notice = null;
		this.loadError = null;
		if (id === null) {
			this.conversation = null;
			this.systemPrompt = '';
			this.model = this.#preferredModel();
			return;
		}
		try {
			const detail = await getConversation(id);
			this.conversation = detail;
			this.model = detail.model;
			this.systemPrompt = detail.system_prompt;
		} catch (error) {
			this.conversation = null;
			this.loadError =
				error instanceof ApiFailure && error.status === 404
					? 'This conversation does not exist, or is not yours.'
					: (error as Error).message;
		}
	}

	chooseModel(model: string): void {
		this.model = model;
		localStorage.setItem(LAST_MODEL, model);
		if (this.conversation && this.conversation.model !== model) {
			void updateConversation(this.conversation.id, { model }).then((c) => conversations.touched(c));
		}
	}

	async setSystemPrompt(text: string): Promise<void> {
		this.systemPrompt = text;
		if (this.conversation) {
			conversations.touched(await updateConversation(this.conversation.id, { system_prompt: text }));
		}
	}

	send(text: string): Promise<void> {
		return this.#run(planSend(this.systemPrompt, this.turns, text));
	}

	regenerate(): Promise<void> {
		const plan = planRegenerate(this.systemPrompt, this.turns);
		return plan ? this.#run(plan) : Promise.resolve();
	}

	edit(position: number, text: string): Promise<void> {
		const plan = planEdit(this.systemPrompt, this.turns, position, text);
		return plan ? this.#run(plan) : Promise.resolve();
	}

	/** Stop the answer: the connection closes and the gateway stops the engine's work. */
	stop(): void {
		this.#abort?.abort();
	}

	#preferredModel(): string {
		const models = status.models;
		const last = localStorage.getItem(LAST_MODEL);
		return last && models.includes(last) ? last : (models[0] ?? '');
	}

	async #run(plan: Plan): Promise<void> {
		if (this.busy) return;
		this.unsent = plan.userMessage;
		if (!this.model) {
			this.notice = { kind: 'error', text: 'No model is available to your department yet.' };
			return;
		}
		this.notice = null;
		this.phase = 'saving';
		const abort = new AbortController();
		this.#abort = abort;
		try {
			const id = await this.#stored(plan);
			if (abort.signal.aborted) return;
			this.phase = 'waiting';
			this.partial = '';
			const answer = await streamAnswer({
				model: this.model,
				messages: plan.request,
				signal: abort.signal,
				onText: (text) => {
					this.phase = 'streaming';
					this.partial += text;
				}
			});
			if (answer.content) {
				const usage = answer.usage
					? {
							prompt_tokens: answer.usage.prompt_tokens,
							completion_tokens: answer.usage.completion_tokens,
							model: this.model
						}
					: null;
				this.conversation = await appendMessages(id, [
					{ role: 'assistant', content: answer.content, usage }
				]);
			}
			if (answer.stopped) this.notice = { kind: 'stopped', text: 'Stopped.' };
			if (this.conversation) conversations.touched(this.conversation);
		} catch (error) {
			this.notice = noticeFor(error);
		} finally {
			this.phase = 'idle';
			this.partial = '';
			this.#abort = null;
			void status.refreshUsage();
		}
	}

	/** Carry out the plan's storage part; the conversation's id. */
	async #stored(plan: Plan): Promise<string> {
		let conversation = this.conversation;
		if (conversation === null) {
			const created = await createConversation({
				model: this.model,
				title: titleFrom(plan.userMessage ?? ''),
				system_prompt: this.systemPrompt
			});
			conversation = { ...created, messages: [] };
			this.conversation = conversation;
			conversations.touched(created);
			void goto(`/c/${created.id}`, { replaceState: true, keepFocus: true, noScroll: true });
		}
		if (plan.truncateFrom !== null) {
			conversation = await truncateConversation(conversation.id, plan.truncateFrom);
			this.conversation = conversation;
		}
		if (plan.userMessage !== null) {
			conversation = await appendMessages(conversation.id, [
				{ role: 'user', content: plan.userMessage }
			]);
			this.conversation = conversation;
			this.unsent = null;
			saveDraft(conversation.id, '');
			saveDraft(null, '');
		}
		return conversation.id;
	}
}

export const chat = new ChatStore();
