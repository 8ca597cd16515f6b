"""The support desk's MCP server for the_stack.ipynb: open tickets (a read) and new tickets (a write).

Run by the ``mcp`` connector as ``python support_server.py`` (stdio). ``open_tickets`` is annotated read-only;
``create_ticket`` writes a ticket into the server's working directory (the private directory the connector
gives it), which is why the connector asks before it runs. ``docs://escalation`` is a resource the agent can
search and cite.
"""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

server = MCPServer("support-desk")

TICKETS = {
    1: [("T-1001", "ada@example.com", "Invoice shows the wrong billing address")],
    2: [("T-1002", "alan@example.com", "Return of order 3 not refunded yet"),
        ("T-1004", "alan@example.com", "Asked for a copy of the receipt")],
    3: [],
}


@server.tool(annotations=ToolAnnotations(read_only_hint=True, destructive_hint=False))
def open_tickets(customer_id: int) -> str:
    """The open support tickets of one customer: id, the address that wrote in, subject."""
    tickets = TICKETS.get(customer_id, [])
    if not tickets:
        return f"customer {customer_id}: no open tickets"
    return "\n".join(f"{ticket} from {email}: {subject}" for ticket, email, subject in tickets)


@server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
def create_ticket(customer_id: int, subject: str) -> str:
    """Open a new support ticket for a customer (written to the desk's queue)."""
    queue = os.path.join(os.getcwd(), "queue.jsonl")
    with open(queue, "a", encoding="utf-8") as handle:
        handle.write(json.dumps({"customer_id": customer_id, "subject": subject}) + "\n")
    with open(queue, encoding="utf-8") as handle:
        number = 1100 + sum(1 for _ in handle)
    return f"ticket T-{number} opened for customer {customer_id}: {subject}"


@server.resource("docs://escalation", name="escalation", description="Escalation policy", mime_type="text/markdown")
def escalation() -> str:
    return ("# Escalation policy\n\nA refund still open 14 days after the return was received is escalated "
            "to the finance on-call, who answers within one working day.\n")


if __name__ == "__main__":
    server.run()
