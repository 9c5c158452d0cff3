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
import { answeredVersion, type AssistantCard } from '$lib/services/assistants';
import { streamAnswer } from '$lib/services/chat';
import {
	appendMessages,
	createConversation,
	getConversation,
	truncateConversation,
	updateConversation,
	type ConversationDetail
} from '$lib/services/conversations';
import { assistants } from '$lib/stores/assistants.svelte';
import { conversations } from '$lib/stores/conversations.svelte';
import { status } from '$lib/stores/status.svelte';

export type Phase = 'idle' | 'saving' | 'waiting' | 'streaming';

const LAST_MODEL = 'enclave.model';

class ChatStore {
	conversation = $state<ConversationDetail | null>(null);
	model = $state('');
	/** What a new chat was pointed at: an assistant's id, or null for ``model``. */
	#assistantId = $state<string | null>(null);
	/** Whether the person picked what a new chat talks to (else the department's default
	 * assistant is taken, once the assistants are loaded). */
	picked = $state(false);
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
			this.#assistantId = null;
			this.picked = false;
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

	/** The department assistant this chat talks to (its slug is the request's model), or
	 * null: a plain model with the person's own system prompt. */
	get assistant(): AssistantCard | null {
		if (this.conversation) return assistants.byId(this.conversation.assistant?.id);
		return this.picked ? assistants.byId(this.#assistantId) : assistants.preferred;
	}

	/** The system prompt the person wrote (an assistant brings its own instead). */
	get ownPrompt(): string {
		return this.assistant ? '' : this.systemPrompt;
	}

	/** The name a request carries: the assistant's slug, or the model's. */
	get requestModel(): string {
		return this.assistant?.slug ?? this.model;
	}

	/** The model that answers: an assistant's own, or the appliance's default for it. */
	get servingModel(): string {
		const assistant = this.assistant;
		if (!assistant) return this.model;
		return assistant.model ?? status.models[0] ?? '';
	}

	/** Whether this chat belongs to an assistant that the person can no longer use. */
	get assistantGone(): boolean {
		return Boolean(this.conversation?.assistant && this.assistant === null && assistants.loaded);
	}

	/** Start the new chat with ``assistant`` (a new chat only: a conversation keeps its own). */
	chooseAssistant(assistant: AssistantCard): void {
		if (this.conversation) return;
		this.#assistantId = assistant.id;
		this.picked = true;
	}

	chooseModel(model: string): void {
		this.picked = true;
		if (this.conversation?.assistant) return;
		this.#assistantId = null;
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
		return this.#run(planSend(this.ownPrompt, this.turns, text));
	}

	regenerate(): Promise<void> {
		const plan = planRegenerate(this.ownPrompt, this.turns);
		return plan ? this.#run(plan) : Promise.resolve();
	}

	edit(position: number, text: string): Promise<void> {
		const plan = planEdit(this.ownPrompt, this.turns, position, text);
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
		if (this.assistantGone) {
			this.notice = { kind: 'error', text: 'This assistant is no longer available to your department.' };
			return;
		}
		if (!this.requestModel) {
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
				model: this.requestModel,
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
							model: this.requestModel
						}
					: null;
				const version = answeredVersion(answer.assistant);
				this.conversation = await appendMessages(id, [
					{ role: 'assistant', content: answer.content, usage, ...(version ? { assistant_version: version } : {}) }
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
				model: this.requestModel,
				title: titleFrom(plan.userMessage ?? ''),
				system_prompt: this.ownPrompt,
				...(this.assistant ? { assistant_id: this.assistant.id } : {})
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
