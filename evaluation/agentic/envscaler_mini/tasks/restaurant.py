"""Restaurant: reservations by guest name, free tables by time and size, menu items by name."""

from ._common import TaskBook, call, check, close

ENV_CLASS = "RestaurantDesk"


def _res(guest, phone, day, time, size, table, status="booked"):
    return {"guest_name": guest, "phone": phone, "date": day, "time": time, "party_size": size, "table_id": table,
            "status": status, "notes": ""}


INIT_CONFIG = {
    "tables": {"T1": {"seats": 2, "area": "window"}, "T2": {"seats": 2, "area": "patio"},
               "T3": {"seats": 4, "area": "main"}, "T4": {"seats": 4, "area": "window"},
               "T5": {"seats": 6, "area": "main"}, "T6": {"seats": 8, "area": "private room"}},
    "reservations": {
        "RS-201": _res("Alice Moreno", "555-3101", "2025-06-14", "19:00", 2, "T1"),
        "RS-202": _res("Brian Cho", "555-3102", "2025-06-14", "19:00", 4, "T3"),
        "RS-203": _res("Carla Jensen", "555-3103", "2025-06-14", "20:00", 6, "T5"),
        "RS-204": _res("Dmitri Volkov", "555-3104", "2025-06-15", "18:30", 2, "T2"),
        "RS-205": _res("Erin Walsh", "555-3105", "2025-06-14", "19:00", 8, "T6", "cancelled"),
    },
    "menu": {
        "MN-1": {"name": "Wild Mushroom Risotto", "category": "main", "price": 21.0, "available": True},
        "MN-2": {"name": "Grilled Sea Bass", "category": "main", "price": 27.5, "available": True},
        "MN-3": {"name": "Burrata Salad", "category": "starter", "price": 14.0, "available": True},
        "MN-4": {"name": "Lamb Shoulder", "category": "main", "price": 29.0, "available": False},
        "MN-5": {"name": "Lemon Tart", "category": "dessert", "price": 9.5, "available": True},
        "MN-6": {"name": "Chocolate Fondant", "category": "dessert", "price": 10.0, "available": True},
    },
}

RES = INIT_CONFIG["reservations"]
GUEST = {r["guest_name"]: rid for rid, r in RES.items() if r["status"] == "booked"}
DAY = {"2025-06-14": "14 June 2025", "2025-06-15": "15 June 2025", "2025-06-16": "16 June 2025"}


def _field(rid: str, key: str, value) -> dict:
    return check(f"{rid} {key} is {value}", f"s['reservations'][{rid!r}][{key!r}] == {value!r}")


def _find(guest: str) -> dict:
    return call("find_reservations", guest_name=guest)


def build(book: TaskBook) -> None:
    # New reservations on the smallest free table that fits.
    for guest, phone, day, time, size, table, extra in [
            ("Farah Idris", "555-3110", "2025-06-14", "19:00", 2, "T2", ""),
            ("George Lam", "555-3111", "2025-06-14", "19:30", 4, "T4", ""),
            ("Hugo Brandt", "555-3112", "2025-06-15", "20:00", 6, "T5", ""),
            ("Ivy Chen", "555-3113", "2025-06-14", "20:30", 7, "T6", ""),
            ("Jonas Meyer", "555-3114", "2025-06-15", "18:00", 2, "T1", ""),
            ("Kira Novak", "555-3115", "2025-06-15", "19:00", 2, "T1", " They would like to sit by the window.")]:
        book.add(f"Reserve a table for {guest} (phone {phone}), party of {size}, on {DAY[day]} at {time}. Use the "
                 f"smallest free table that seats them.{extra}",
                 [check(f"{guest} booked on {table}",
                        f"any(r['guest_name'] == {guest!r} and r['date'] == {day!r} and r['time'] == {time!r} and "
                        f"r['party_size'] == {size} and r['table_id'] == {table!r} and r['status'] == 'booked' "
                        f"for r in s['reservations'].values())")],
                 [call("list_available_tables", date=day, time=time, party_size=size),
                  call("create_reservation", guest_name=guest, phone=phone, date=day, time=time, party_size=size,
                       table_id=table)])

    # Bigger parties need a bigger table first.
    for guest, size, tables in [("Alice Moreno", 4, ["T4"]), ("Brian Cho", 6, ["T6"]), ("Dmitri Volkov", 3, ["T3", "T4"])]:
        rid, table = GUEST[guest], tables[0]
        r = RES[rid]
        book.add(f"{guest}'s party on {DAY[r['date']]} is now {size} people. Update the reservation, moving it to "
                 f"the smallest free table that seats them if needed.",
                 [_field(rid, "party_size", size),
                  check(f"{rid} on one of {tables}", f"s['reservations'][{rid!r}]['table_id'] in {tables!r}")],
                 [_find(guest), call("list_available_tables", date=r["date"], time=r["time"], party_size=size),
                  call("change_table", reservation_id=rid, table_id=table),
                  call("update_party_size", reservation_id=rid, party_size=size)])
    book.add("Carla Jensen's party is one person smaller than booked. Update the reservation.",
             [_field("RS-203", "party_size", 5), _field("RS-203", "table_id", "T5")],
             [_find("Carla Jensen"), call("update_party_size", reservation_id="RS-203", party_size=5)])
    book.add("Brian Cho wants his party moved to the private room. Change the table.",
             [_field("RS-202", "table_id", "T6")],
             [_find("Brian Cho"), call("change_table", reservation_id="RS-202", table_id="T6")])

    # New time, same table.
    for guest, day, time in [("Brian Cho", "2025-06-14", "21:00"), ("Dmitri Volkov", "2025-06-16", "18:30"),
                             ("Carla Jensen", "2025-06-14", "21:30")]:
        rid = GUEST[guest]
        book.add(f"Move {guest}'s reservation to {DAY[day]} at {time}.",
                 [_field(rid, "date", day), _field(rid, "time", time)],
                 [_find(guest), call("reschedule_reservation", reservation_id=rid, date=day, time=time)])

    # Cancel and notes.
    for guest in ["Alice Moreno", "Carla Jensen", "Dmitri Volkov"]:
        rid = GUEST[guest]
        book.add(f"{guest} called to cancel their reservation.", [_field(rid, "status", "cancelled")],
                 [_find(guest), call("cancel_reservation", reservation_id=rid)])
    for guest, note in [("Alice Moreno", "birthday, bring a candle with dessert"), ("Brian Cho", "one guest has a nut allergy")]:
        rid = GUEST[guest]
        book.add(f"Add a note to {guest}'s reservation: {note}.",
                 [check("note recorded", f"{note!r} in s['reservations'][{rid!r}]['notes']")],
                 [_find(guest), call("add_note", reservation_id=rid, note=note)])

    # Menu.
    for dish, available, query in [("Grilled Sea Bass", False, "sea bass"), ("Lamb Shoulder", True, "lamb")]:
        iid = next(i for i, m in INIT_CONFIG["menu"].items() if m["name"] == dish)
        text = "is sold out tonight; mark it unavailable" if not available else "is back; mark it available again"
        book.add(f"The {dish} {text}.", [check(f"{iid} available={available}", f"s['menu'][{iid!r}]['available'] is {available}")],
                 [call("search_menu", query=query), call("set_item_availability", item_id=iid, available=available)])
    for dish, price, text, query in [("Burrata Salad", 15.5, "to 15.50", "burrata"), ("Lemon Tart", 10.5, "by 1.00", "lemon")]:
        iid = next(i for i, m in INIT_CONFIG["menu"].items() if m["name"] == dish)
        book.add(f"Raise the price of the {dish} {text}.", [check(f"{iid} price {price}", close(f"s['menu'][{iid!r}]['price']", price))],
                 [call("search_menu", query=query), call("update_menu_price", item_id=iid, price=price)])
    book.add("The pastry chef is off tonight: mark every dessert on the menu unavailable.",
             [check("MN-5 unavailable", "s['menu']['MN-5']['available'] is False"),
              check("MN-6 unavailable", "s['menu']['MN-6']['available'] is False")],
             [call("search_menu", category="dessert"), call("set_item_availability", item_id="MN-5", available=False),
              call("set_item_availability", item_id="MN-6", available=False)])
    book.add("We ran out of the Wild Mushroom Risotto; mark it unavailable. Also raise the Grilled Sea Bass to 29.00.",
             [check("MN-1 unavailable", "s['menu']['MN-1']['available'] is False"),
              check("MN-2 price 29", close("s['menu']['MN-2']['price']", 29.0))],
             [call("search_menu", query="risotto"), call("set_item_availability", item_id="MN-1", available=False),
              call("search_menu", query="sea bass"), call("update_menu_price", item_id="MN-2", price=29.0)])
