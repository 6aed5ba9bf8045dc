"""Import-only stand-in: the names ``trinity.common.models.mm_utils`` imports."""

ChatTemplateContentFormat = str
ConversationMessage = dict


def parse_chat_messages(*args, **kwargs):
    raise NotImplementedError("the tunedsl test shim of vLLM parses no multi-modal messages")


async def parse_chat_messages_async(*args, **kwargs):
    raise NotImplementedError("the tunedsl test shim of vLLM parses no multi-modal messages")
