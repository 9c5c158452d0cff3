/** The user's conversations, stored by the gateway (/api/conversations). */
import { api, type Schemas } from '$lib/api/client';
import { unwrap } from '$lib/api/errors';

export type Conversation = Schemas['ConversationRead'];
export type ConversationDetail = Schemas['ConversationDetail'];
export type Message = Schemas['MessageRead'];
export type NewMessage = Schemas['MessageCreate'];
export type SearchHit = Schemas['SearchHit'];

const byId = (id: string) => ({ params: { path: { conversation_id: id } } });

export async function listConversations(after: string | null, limit = 50) {
	const query = after ? { after, limit } : { limit };
	return unwrap(await api.GET('/api/conversations', { params: { query } }));
}

export async function searchConversations(q: string, limit = 20): Promise<SearchHit[]> {
	return unwrap(await api.GET('/api/conversations/search', { params: { query: { q, limit } } }))
		.items;
}

export async function createConversation(body: Schemas['ConversationCreate']) {
	return unwrap(await api.POST('/api/conversations', { body }));
}

export async function getConversation(id: string): Promise<ConversationDetail> {
	return unwrap(await api.GET('/api/conversations/{conversation_id}', byId(id)));
}

export async function updateConversation(id: string, body: Schemas['ConversationUpdate']) {
	return unwrap(await api.PATCH('/api/conversations/{conversation_id}', { ...byId(id), body }));
}

export async function deleteConversation(id: string): Promise<void> {
	unwrap(await api.DELETE('/api/conversations/{conversation_id}', byId(id)));
}

export async function appendMessages(id: string, messages: NewMessage[]) {
	return unwrap(
		await api.POST('/api/conversations/{conversation_id}/messages', {
			...byId(id),
			body: { messages }
		})
	);
}

export async function truncateConversation(id: string, fromPosition: number) {
	return unwrap(
		await api.POST('/api/conversations/{conversation_id}/truncate', {
			...byId(id),
			body: { from_position: fromPosition }
		})
	);
}
