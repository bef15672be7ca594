"""Telecom: lines by phone number, plans and add-ons by name, then plan changes, payments, tickets."""

from ._common import TaskBook, call, check, close

ENV_CLASS = "TelecomAccounts"


def _line(name, phone, plan, status, due, addons):
    return {"name": name, "phone_number": phone, "plan_id": plan, "status": status, "balance_due": due, "addons": addons}


INIT_CONFIG = {
    "plans": {"PL-S": {"name": "Basic 5", "monthly_fee": 15.0, "data_gb": 5},
              "PL-M": {"name": "Plus 20", "monthly_fee": 30.0, "data_gb": 20},
              "PL-L": {"name": "Max 100", "monthly_fee": 50.0, "data_gb": 100}},
    "addons": {
        "AD-1": {"name": "International Roaming Pack", "monthly_fee": 10.0, "compatible_plans": ["PL-M", "PL-L"]},
        "AD-2": {"name": "Extra 5 GB", "monthly_fee": 5.0, "compatible_plans": ["PL-S", "PL-M"]},
        "AD-3": {"name": "Device Insurance", "monthly_fee": 8.0, "compatible_plans": ["PL-S", "PL-M", "PL-L"]},
        "AD-4": {"name": "Streaming Bundle", "monthly_fee": 12.0, "compatible_plans": ["PL-L"]},
    },
    "subscribers": {
        "SB-601": _line("Aaron Fitzgerald", "07700 900101", "PL-M", "active", 0.0, ["AD-3"]),
        "SB-602": _line("Bianca Russo", "07700 900102", "PL-S", "active", 22.5, []),
        "SB-603": _line("Cyrus Farahani", "07700 900103", "PL-L", "active", 0.0, ["AD-1", "AD-4"]),
        "SB-604": _line("Delia Mensah", "07700 900104", "PL-M", "suspended", 45.0, ["AD-2"]),
        "SB-605": _line("Evan Price", "07700 900105", "PL-S", "active", 0.0, ["AD-2"]),
    },
    "tickets": {"TK-81": {"subscriber_id": "SB-603", "category": "network", "description": "No signal at home",
                          "status": "open"}},
}

LINES = INIT_CONFIG["subscribers"]
PHONE = {sid: line["phone_number"] for sid, line in LINES.items()}
PLAN = {p["name"]: pid for pid, p in INIT_CONFIG["plans"].items()}
ADDON = {a["name"]: aid for aid, a in INIT_CONFIG["addons"].items()}


def _get(sid: str) -> dict:
    return call("get_subscriber_by_phone", phone_number=PHONE[sid])


def _plan(sid: str, pid: str) -> dict:
    return check(f"{sid} on {pid}", f"s['subscribers'][{sid!r}]['plan_id'] == {pid!r}")


def _addons(sid: str, addons: list) -> dict:
    return check(f"{sid} add-ons are {addons}", f"sorted(s['subscribers'][{sid!r}]['addons']) == {sorted(addons)!r}")


def _due(sid: str, value: float) -> dict:
    return check(f"{sid} owes {value:.2f}", close(f"s['subscribers'][{sid!r}]['balance_due']", value))


def _status(sid: str, status: str) -> dict:
    return check(f"{sid} {status}", f"s['subscribers'][{sid!r}]['status'] == {status!r}")


def build(book: TaskBook) -> None:
    # Plan changes (incompatible add-ons drop automatically).
    for sid, plan in [("SB-601", "Max 100"), ("SB-603", "Plus 20"), ("SB-601", "Basic 5")]:
        pid = PLAN[plan]
        kept = [a for a in LINES[sid]["addons"] if pid in INIT_CONFIG["addons"][a]["compatible_plans"]]
        book.add(f"The customer on {PHONE[sid]} wants to switch to the {plan} plan.", [_plan(sid, pid), _addons(sid, kept)],
                 [_get(sid), call("list_plans"), call("change_plan", subscriber_id=sid, plan_id=pid)])
    book.add("The customer on 07700 900105 wants the cheapest plan with at least 20 GB of data. Switch them.",
             [_plan("SB-605", "PL-M"), _addons("SB-605", ["AD-2"])],
             [_get("SB-605"), call("list_plans"), call("change_plan", subscriber_id="SB-605", plan_id="PL-M")])
    book.add("The customer on 07700 900102 wants to move to the Plus 20 plan and is paying the full balance due "
             "right now. Record the payment and switch the plan.",
             [_due("SB-602", 0.0), _plan("SB-602", "PL-M")],
             [_get("SB-602"), call("record_payment", subscriber_id="SB-602", amount=22.5), call("list_plans"),
              call("change_plan", subscriber_id="SB-602", plan_id="PL-M")])

    # Add-ons.
    for sid, addon in [("SB-601", "International Roaming Pack"), ("SB-605", "Device Insurance"),
                       ("SB-603", "Device Insurance")]:
        aid = ADDON[addon]
        book.add(f"Add the {addon} add-on to the line {PHONE[sid]}.", [_addons(sid, LINES[sid]["addons"] + [aid])],
                 [_get(sid), call("list_addons"), call("add_addon", subscriber_id=sid, addon_id=aid)])
    book.add("The customer on 07700 900101 wants the Streaming Bundle. If their plan does not support it, move "
             "them to a plan that does, then add it.",
             [_plan("SB-601", "PL-L"), _addons("SB-601", ["AD-3", "AD-4"])],
             [_get("SB-601"), call("list_addons"), call("change_plan", subscriber_id="SB-601", plan_id="PL-L"),
              call("add_addon", subscriber_id="SB-601", addon_id="AD-4")])
    book.add("The customer on 07700 900102 is travelling abroad and wants roaming. They pay their full balance "
             "now; then put them on the cheapest plan that supports the International Roaming Pack and add it.",
             [_due("SB-602", 0.0), _plan("SB-602", "PL-M"), _addons("SB-602", ["AD-1"])],
             [_get("SB-602"), call("list_addons"), call("list_plans"),
              call("record_payment", subscriber_id="SB-602", amount=22.5),
              call("change_plan", subscriber_id="SB-602", plan_id="PL-M"),
              call("add_addon", subscriber_id="SB-602", addon_id="AD-1")])

    # Removing add-ons.
    for sid, addon in [("SB-603", "Streaming Bundle"), ("SB-605", "Extra 5 GB"), ("SB-601", "Device Insurance")]:
        aid = ADDON[addon]
        book.add(f"Remove the {addon} add-on from the line {PHONE[sid]}.",
                 [_addons(sid, [a for a in LINES[sid]["addons"] if a != aid])],
                 [_get(sid), call("remove_addon", subscriber_id=sid, addon_id=aid)])
    book.add("Remove every add-on from the line 07700 900103.", [_addons("SB-603", [])],
             [_get("SB-603"), call("remove_addon", subscriber_id="SB-603", addon_id="AD-1"),
              call("remove_addon", subscriber_id="SB-603", addon_id="AD-4")])

    # Payments and suspension.
    for sid, amount in [("SB-602", 10.0), ("SB-602", 22.5), ("SB-604", 20.0)]:
        left = round(LINES[sid]["balance_due"] - amount, 2)
        book.add(f"The customer on {PHONE[sid]} paid {amount:.2f}. Record the payment.", [_due(sid, left)],
                 [_get(sid), call("record_payment", subscriber_id=sid, amount=amount)])
    book.add("The customer on 07700 900104 is paying everything they owe. Record it and reactivate the line.",
             [_due("SB-604", 0.0), _status("SB-604", "active")],
             [_get("SB-604"), call("record_payment", subscriber_id="SB-604", amount=45.0),
              call("reactivate_line", subscriber_id="SB-604")])
    book.add("The customer on 07700 900104 pays off their balance in full. Record it, reactivate the line and add "
             "Device Insurance.",
             [_due("SB-604", 0.0), _status("SB-604", "active"), _addons("SB-604", ["AD-2", "AD-3"])],
             [_get("SB-604"), call("record_payment", subscriber_id="SB-604", amount=45.0),
              call("reactivate_line", subscriber_id="SB-604"), call("list_addons"),
              call("add_addon", subscriber_id="SB-604", addon_id="AD-3")])
    for sid, reason in [("SB-605", "lost phone"), ("SB-601", "travelling for six months")]:
        book.add(f"Suspend the line {PHONE[sid]}; reason: {reason}.", [_status(sid, "suspended")],
                 [_get(sid), call("suspend_line", subscriber_id=sid, reason=reason)])

    # Tickets.
    for sid, category, description in [("SB-602", "billing", "Charged twice for March"),
                                       ("SB-605", "device", "Screen flickers after update"),
                                       ("SB-603", "network", "Calls drop on the train")]:
        before = sum(1 for t in INIT_CONFIG["tickets"].values() if t["subscriber_id"] == sid)
        book.add(f"Open a {category} ticket for the line {PHONE[sid]}: \"{description}\".",
                 [check("ticket opened", f"any(t['subscriber_id'] == {sid!r} and t['category'] == {category!r} and "
                                         f"t['status'] == 'open' for t in s['tickets'].values() if t['description'] == "
                                         f"{description!r})"),
                  check("exactly one new ticket",
                        f"sum(1 for t in s['tickets'].values() if t['subscriber_id'] == {sid!r}) == {before + 1}")],
                 [_get(sid), call("open_ticket", subscriber_id=sid, category=category, description=description)])
    book.add("The network problem reported by the customer on 07700 900103 is fixed (we replaced their SIM). "
             "Close the ticket.",
             [check("TK-81 closed", "s['tickets']['TK-81']['status'] == 'closed'")],
             [_get("SB-603"), call("list_tickets", subscriber_id="SB-603"),
              call("close_ticket", ticket_id="TK-81", resolution="replaced SIM")])
