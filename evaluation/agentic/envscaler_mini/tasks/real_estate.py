"""Real estate: properties by address, agents by name, then offers, prices, viewings and listings."""

from ._common import TaskBook, call, check

ENV_CLASS = "PropertyListings"


def _prop(address, city, bedrooms, price, status, agent):
    return {"address": address, "city": city, "bedrooms": bedrooms, "price": price, "status": status, "agent_id": agent}


def _offer(prop, buyer, amount, status):
    return {"property_id": prop, "buyer_name": buyer, "amount": amount, "status": status}


INIT_CONFIG = {
    "agents": {"AG-1": {"name": "Rosa Delgado", "phone": "555-2001"},
               "AG-2": {"name": "Kevin Park", "phone": "555-2002"},
               "AG-3": {"name": "Amara Osei", "phone": "555-2003"}},
    "properties": {
        "PR-701": _prop("14 Birch Lane", "Portland", 3, 525000, "available", "AG-1"),
        "PR-702": _prop("220 River Street, Apt 5", "Portland", 2, 389000, "available", "AG-2"),
        "PR-703": _prop("9 Orchard Close", "Salem", 4, 610000, "under_offer", "AG-1"),
        "PR-704": _prop("71 Cedar Avenue", "Salem", 3, 455000, "available", "AG-3"),
        "PR-705": _prop("3 Harbor View", "Portland", 5, 980000, "withdrawn", "AG-2"),
        "PR-706": _prop("48 Maple Court", "Eugene", 2, 310000, "available", "AG-3"),
    },
    "offers": {
        "OF-41": _offer("PR-701", "Jamal Wright", 505000, "pending"),
        "OF-42": _offer("PR-701", "Sarah Lindqvist", 515000, "pending"),
        "OF-43": _offer("PR-703", "Ben Torres", 600000, "accepted"),
        "OF-44": _offer("PR-704", "Helen Ng", 440000, "pending"),
        "OF-45": _offer("PR-706", "Ravi Patel", 290000, "rejected"),
    },
    "viewings": {
        "VW-11": {"property_id": "PR-702", "client_name": "Helen Ng", "date": "2025-05-10", "status": "scheduled"},
        "VW-12": {"property_id": "PR-706", "client_name": "Jamal Wright", "date": "2025-05-11", "status": "scheduled"},
    },
}

PROPS = INIT_CONFIG["properties"]
ADDRESS = {p["address"]: pid for pid, p in PROPS.items()}
OFFERS = INIT_CONFIG["offers"]


def _offer_status(oid: str, status: str) -> dict:
    return check(f"offer {oid} {status}", f"s['offers'][{oid!r}]['status'] == {status!r}")


def _prop_field(pid: str, key: str, value) -> dict:
    return check(f"{pid} {key} is {value}", f"s['properties'][{pid!r}][{key!r}] == {value!r}")


def _has_offer(pid: str, buyer: str, amount: int, status: str) -> dict:
    return check(f"{status} offer of {amount} by {buyer} on {pid}",
                 f"any(o['property_id'] == {pid!r} and o['buyer_name'] == {buyer!r} and o['amount'] == {amount} and "
                 f"o['status'] == {status!r} for o in s['offers'].values())")


def _viewing(pid: str, client: str, day: str) -> dict:
    return check(f"viewing of {pid} for {client} on {day}",
                 f"any(v['property_id'] == {pid!r} and v['client_name'] == {client!r} and v['date'] == {day!r} and "
                 f"v['status'] == 'scheduled' for v in s['viewings'].values())")


def build(book: TaskBook) -> None:
    # Accept the highest pending offer.
    for address in ["14 Birch Lane", "71 Cedar Avenue"]:
        pid = ADDRESS[address]
        pending = [oid for oid, o in OFFERS.items() if o["property_id"] == pid and o["status"] == "pending"]
        best = max(pending, key=lambda oid: OFFERS[oid]["amount"])
        book.add(f"The seller of {address} wants to accept the highest pending offer. Do it.",
                 [_offer_status(best, "accepted"), _prop_field(pid, "status", "under_offer")]
                 + [_offer_status(oid, "rejected") for oid in pending if oid != best],
                 [call("get_property_by_address", address=address), call("list_offers", property_id=pid),
                  call("accept_offer", offer_id=best)])

    # New offers.
    for buyer, address, amount in [("Helen Ng", "220 River Street, Apt 5", 380000),
                                   ("Jamal Wright", "48 Maple Court", 305000),
                                   ("Ravi Patel", "14 Birch Lane", 520000), ("Sarah Lindqvist", "71 Cedar Avenue", 450000)]:
        pid = ADDRESS[address]
        book.add(f"{buyer} offers ${amount:,} for {address}. Record the offer.",
                 [_has_offer(pid, buyer, amount, "pending")],
                 [call("get_property_by_address", address=address),
                  call("submit_offer", property_id=pid, buyer_name=buyer, amount=amount)])
    book.add("Ravi Patel offers the full asking price for 48 Maple Court and the seller accepts straight away. "
             "Record the offer and accept it.",
             [_has_offer("PR-706", "Ravi Patel", 310000, "accepted"), _prop_field("PR-706", "status", "under_offer")],
             [call("get_property_by_address", address="48 Maple Court"),
              call("submit_offer", property_id="PR-706", buyer_name="Ravi Patel", amount=310000),
              call("accept_offer", offer_id="OF-46")])

    # Reject one offer.
    for buyer, address in [("Jamal Wright", "14 Birch Lane"), ("Helen Ng", "71 Cedar Avenue")]:
        pid = ADDRESS[address]
        oid = next(o for o, x in OFFERS.items() if x["property_id"] == pid and x["buyer_name"] == buyer)
        book.add(f"The seller of {address} declines {buyer}'s offer. Reject it and leave any other offer as it is.",
                 [_offer_status(oid, "rejected"), _prop_field(pid, "status", "available")]
                 + [_offer_status(o, x["status"]) for o, x in OFFERS.items() if x["property_id"] == pid and o != oid],
                 [call("get_property_by_address", address=address), call("list_offers", property_id=pid),
                  call("reject_offer", offer_id=oid)])

    # Prices.
    for address, price, text in [("14 Birch Lane", 499000, "to $499,000"), ("220 River Street, Apt 5", 369550, "by 5%"),
                                 ("48 Maple Court", 299000, "to $299,000"), ("71 Cedar Avenue", 449000, "by $6,000")]:
        pid = ADDRESS[address]
        book.add(f"Reduce the asking price of {address} {text}.", [_prop_field(pid, "price", price)],
                 [call("get_property_by_address", address=address),
                  call("update_listing_price", property_id=pid, new_price=price)])
    book.add("Lower the asking price of every available property in Salem by $10,000.",
             [_prop_field("PR-704", "price", 445000), _prop_field("PR-703", "price", 610000)],
             [call("search_properties", city="Salem"), call("update_listing_price", property_id="PR-704", new_price=445000)])

    # Viewings.
    for client, address, day in [("Ben Torres", "14 Birch Lane", "2025-05-12"), ("Sarah Lindqvist", "71 Cedar Avenue", "2025-05-13"),
                                 ("Helen Ng", "48 Maple Court", "2025-05-14")]:
        pid = ADDRESS[address]
        book.add(f"Book a viewing of {address} for {client} on {day}.", [_viewing(pid, client, day)],
                 [call("get_property_by_address", address=address),
                  call("schedule_viewing", property_id=pid, client_name=client, date=day)])
    book.add("Book a viewing of 220 River Street, Apt 5 for Ravi Patel on 2025-05-10; if that day is already "
             "taken, book 2025-05-11 instead.",
             [_viewing("PR-702", "Ravi Patel", "2025-05-11")],
             [call("get_property_by_address", address="220 River Street, Apt 5"),
              call("schedule_viewing", property_id="PR-702", client_name="Ravi Patel", date="2025-05-11")])
    book.add("Find the cheapest available property in Portland with at least 3 bedrooms and book a viewing of "
             "it for Helen Ng on 2025-05-15.",
             [_viewing("PR-701", "Helen Ng", "2025-05-15")],
             [call("search_properties", city="Portland", min_bedrooms=3),
              call("schedule_viewing", property_id="PR-701", client_name="Helen Ng", date="2025-05-15")])

    # Withdraw and relist.
    for address in ["48 Maple Court", "220 River Street, Apt 5"]:
        pid = ADDRESS[address]
        book.add(f"The owner of {address} is taking it off the market. Withdraw the listing.",
                 [_prop_field(pid, "status", "withdrawn")],
                 [call("get_property_by_address", address=address), call("withdraw_listing", property_id=pid)])
    book.add("The owner of 71 Cedar Avenue is taking it off the market. Reject any pending offers on it, then "
             "withdraw the listing.",
             [_prop_field("PR-704", "status", "withdrawn"), _offer_status("OF-44", "rejected")],
             [call("get_property_by_address", address="71 Cedar Avenue"), call("list_offers", property_id="PR-704"),
              call("reject_offer", offer_id="OF-44"), call("withdraw_listing", property_id="PR-704")])
    book.add("Put 3 Harbor View back on the market with an asking price of $950,000.",
             [_prop_field("PR-705", "status", "available"), _prop_field("PR-705", "price", 950000)],
             [call("get_property_by_address", address="3 Harbor View"), call("relist_property", property_id="PR-705"),
              call("update_listing_price", property_id="PR-705", new_price=950000)])

    # Agents.
    book.add("Rosa Delgado is leaving the agency. Hand every property she handles over to Kevin Park.",
             [_prop_field("PR-701", "agent_id", "AG-2"), _prop_field("PR-703", "agent_id", "AG-2")],
             [call("list_agents"), call("reassign_agent", property_id="PR-701", agent_id="AG-2"),
              call("reassign_agent", property_id="PR-703", agent_id="AG-2")])
    book.add("Make Rosa Delgado the agent for 48 Maple Court.",
             [_prop_field("PR-706", "agent_id", "AG-1")],
             [call("list_agents"), call("get_property_by_address", address="48 Maple Court"),
              call("reassign_agent", property_id="PR-706", agent_id="AG-1")])
