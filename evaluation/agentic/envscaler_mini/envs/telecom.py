import copy
from typing import Optional


class TelecomAccounts:
    """Customer care system of a mobile operator: subscriber lines (known by phone number), tariff
    plans, add-ons that only work with some plans, balances due and support tickets.

    Rules:
    - Plan changes need an active line with nothing due; add-ons the new plan does not support are
      removed automatically.
    - An add-on can only be added to an active line whose plan supports it, and only once.
    - A payment must be positive and at most the balance due.
    - Only active lines can be suspended; a suspended line is reactivated once nothing is due.
    - Ticket categories are billing, network and device; only open tickets can be closed.
    """

    TICKET_CATEGORIES = ("billing", "network", "device")

    def __init__(self, init_config: Optional[dict] = None):
        self.plans = {}
        self.addons = {}
        self.subscribers = {}
        self.tickets = {}
        for key, value in (init_config or {}).items():
            setattr(self, key, copy.deepcopy(value))

    def _line(self, subscriber_id, active=False):
        line = self.subscribers.get(subscriber_id)
        if line is None:
            return None, {"success": False, "error": f"Subscriber id '{subscriber_id}' not found."}
        if active and line["status"] != "active":
            return None, {"success": False, "error": f"Line is {line['status']}, not active."}
        return line, None

    # -- query tools --

    def get_subscriber_by_phone(self, phone_number: str) -> dict:
        """Look up a subscriber line by phone number (spaces are ignored).

        Args:
            phone_number: Phone number, e.g. '07700 900101'.
        """
        wanted = phone_number.replace(" ", "")
        for sid, line in self.subscribers.items():
            if line["phone_number"].replace(" ", "") == wanted:
                return {"success": True, "data": {"subscriber_id": sid, **line}}
        return {"success": False, "error": f"No line with number '{phone_number}'."}

    def list_plans(self) -> dict:
        """List the tariff plans with id, monthly fee and data allowance."""
        return {"success": True, "data": [{"plan_id": pid, **p} for pid, p in self.plans.items()]}

    def list_addons(self) -> dict:
        """List the add-ons with id, monthly fee and the plans that support each."""
        return {"success": True, "data": [{"addon_id": aid, **a} for aid, a in self.addons.items()]}

    def list_tickets(self, subscriber_id: str) -> dict:
        """List a subscriber's support tickets.

        Args:
            subscriber_id: Internal subscriber id.
        """
        if subscriber_id not in self.subscribers:
            return {"success": False, "error": f"Subscriber id '{subscriber_id}' not found."}
        found = [{"ticket_id": tid, **t} for tid, t in self.tickets.items() if t["subscriber_id"] == subscriber_id]
        return {"success": True, "data": found}

    # -- modification tools --

    def change_plan(self, subscriber_id: str, plan_id: str) -> dict:
        """Switch an active line with nothing due to another plan.

        Args:
            subscriber_id: Internal subscriber id.
            plan_id: Id of the new plan.
        """
        line, error = self._line(subscriber_id, active=True)
        if error:
            return error
        if plan_id not in self.plans:
            return {"success": False, "error": f"Plan '{plan_id}' not found."}
        if line["plan_id"] == plan_id:
            return {"success": False, "error": "The line is already on that plan."}
        if line["balance_due"] > 0:
            return {"success": False, "error": f"Balance due {line['balance_due']:.2f} must be paid first."}
        dropped = [a for a in line["addons"] if plan_id not in self.addons[a]["compatible_plans"]]
        line["addons"] = [a for a in line["addons"] if a not in dropped]
        line["plan_id"] = plan_id
        return {"success": True, "data": {"subscriber_id": subscriber_id, "plan_id": plan_id,
                                          "removed_addons": dropped}}

    def add_addon(self, subscriber_id: str, addon_id: str) -> dict:
        """Add an add-on to an active line whose plan supports it.

        Args:
            subscriber_id: Internal subscriber id.
            addon_id: Add-on id.
        """
        line, error = self._line(subscriber_id, active=True)
        if error:
            return error
        addon = self.addons.get(addon_id)
        if addon is None:
            return {"success": False, "error": f"Add-on '{addon_id}' not found."}
        if addon_id in line["addons"]:
            return {"success": False, "error": "The line already has that add-on."}
        if line["plan_id"] not in addon["compatible_plans"]:
            return {"success": False, "error": f"{addon['name']} is not available on plan {line['plan_id']}; "
                                               f"supported plans: {addon['compatible_plans']}."}
        line["addons"].append(addon_id)
        return {"success": True, "data": {"subscriber_id": subscriber_id, "addons": line["addons"]}}

    def remove_addon(self, subscriber_id: str, addon_id: str) -> dict:
        """Remove an add-on from a line.

        Args:
            subscriber_id: Internal subscriber id.
            addon_id: Add-on id.
        """
        line, error = self._line(subscriber_id)
        if error:
            return error
        if addon_id not in line["addons"]:
            return {"success": False, "error": f"The line has no add-on '{addon_id}'."}
        line["addons"].remove(addon_id)
        return {"success": True, "data": {"subscriber_id": subscriber_id, "addons": line["addons"]}}

    def record_payment(self, subscriber_id: str, amount: float) -> dict:
        """Record a payment against a line's balance due.

        Args:
            subscriber_id: Internal subscriber id.
            amount: Amount paid, positive and at most the balance due.
        """
        line, error = self._line(subscriber_id)
        if error:
            return error
        if not 0 < amount <= line["balance_due"] + 1e-9:
            return {"success": False, "error": f"Amount must be positive and at most {line['balance_due']:.2f}."}
        line["balance_due"] = round(line["balance_due"] - amount, 2)
        return {"success": True, "data": {"subscriber_id": subscriber_id, "balance_due": line["balance_due"]}}

    def suspend_line(self, subscriber_id: str, reason: str) -> dict:
        """Suspend an active line (e.g. a lost phone).

        Args:
            subscriber_id: Internal subscriber id.
            reason: Why the line is suspended.
        """
        line, error = self._line(subscriber_id, active=True)
        if error:
            return error
        line["status"] = "suspended"
        line["suspend_reason"] = reason
        return {"success": True, "data": {"subscriber_id": subscriber_id, "status": "suspended"}}

    def reactivate_line(self, subscriber_id: str) -> dict:
        """Reactivate a suspended line once nothing is due.

        Args:
            subscriber_id: Internal subscriber id.
        """
        line, error = self._line(subscriber_id)
        if error:
            return error
        if line["status"] != "suspended":
            return {"success": False, "error": f"Line is {line['status']}, not suspended."}
        if line["balance_due"] > 0:
            return {"success": False, "error": f"Balance due {line['balance_due']:.2f} must be paid first."}
        line["status"] = "active"
        line.pop("suspend_reason", None)
        return {"success": True, "data": {"subscriber_id": subscriber_id, "status": "active"}}

    def open_ticket(self, subscriber_id: str, category: str, description: str) -> dict:
        """Open a support ticket for a line.

        Args:
            subscriber_id: Internal subscriber id.
            category: billing, network or device.
            description: What the problem is.
        """
        line, error = self._line(subscriber_id)
        if error:
            return error
        if category not in self.TICKET_CATEGORIES:
            return {"success": False, "error": f"Category must be one of {list(self.TICKET_CATEGORIES)}."}
        n = 80 + len(self.tickets) + 1
        while f"TK-{n}" in self.tickets:
            n += 1
        self.tickets[f"TK-{n}"] = {"subscriber_id": subscriber_id, "category": category, "description": description,
                                   "status": "open"}
        return {"success": True, "data": {"ticket_id": f"TK-{n}", **self.tickets[f"TK-{n}"]}}

    def close_ticket(self, ticket_id: str, resolution: str) -> dict:
        """Close an open ticket with a resolution note.

        Args:
            ticket_id: Ticket id.
            resolution: How the problem was solved.
        """
        ticket = self.tickets.get(ticket_id)
        if ticket is None:
            return {"success": False, "error": f"Ticket '{ticket_id}' not found."}
        if ticket["status"] != "open":
            return {"success": False, "error": f"Ticket is already {ticket['status']}."}
        ticket["status"] = "closed"
        ticket["resolution"] = resolution
        return {"success": True, "data": {"ticket_id": ticket_id, **ticket}}
