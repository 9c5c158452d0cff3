"""Every table, imported here so ``Base.metadata`` knows them all."""

from gateway.db.models.api_key import ApiKey
from gateway.db.models.assistant import Assistant, AssistantVersion
from gateway.db.models.audit import AuditRecord
from gateway.db.models.conversation import Conversation, ConversationMessage
from gateway.db.models.department import Department
from gateway.db.models.group_mapping import GroupMapping
from gateway.db.models.request_record import AuditChain, RequestRecord
from gateway.db.models.session import LoginSession
from gateway.db.models.usage import UsageDaily, UsageDailyDepartment
from gateway.db.models.user import User

__all__ = [
    "ApiKey",
    "Assistant",
    "AssistantVersion",
    "AuditChain",
    "AuditRecord",
    "Conversation",
    "ConversationMessage",
    "Department",
    "GroupMapping",
    "LoginSession",
    "RequestRecord",
    "UsageDaily",
    "UsageDailyDepartment",
    "User",
]
