"""Travel: travellers by name, bookings by confirmation code, flights by route and day."""

from ._common import TaskBook, call, check

ENV_CLASS = "TravelBookings"


def _flight(number, origin, destination, date, departure, price, seats):
    return {"flight_number": number, "origin": origin, "destination": destination, "date": date,
            "departure": departure, "price": price, "seats_left": seats}


def _booking(traveler, flight, status, seat, bags, code):
    return {"traveler_id": traveler, "flight_id": flight, "status": status, "seat": seat, "bags": bags,
            "confirmation_code": code}


INIT_CONFIG = {
    "travelers": {"TV-21": {"name": "Amelia Clarke", "loyalty_tier": "gold"},
                  "TV-22": {"name": "Daniel Kim", "loyalty_tier": "silver"},
                  "TV-23": {"name": "Fatima Zahra", "loyalty_tier": "basic"},
                  "TV-24": {"name": "Lucas Schmidt", "loyalty_tier": "basic"}},
    "flights": {
        "FL-601": _flight("SK214", "LHR", "CPH", "2025-05-02", "08:10", 142.0, 4),
        "FL-602": _flight("SK218", "LHR", "CPH", "2025-05-02", "17:45", 118.0, 2),
        "FL-603": _flight("SK214", "LHR", "CPH", "2025-05-03", "08:10", 135.0, 6),
        "FL-604": _flight("LH903", "FRA", "LHR", "2025-05-02", "09:30", 160.0, 1),
        "FL-605": _flight("LH905", "FRA", "LHR", "2025-05-02", "14:00", 189.0, 0),
        "FL-606": _flight("LH907", "FRA", "LHR", "2025-05-02", "19:20", 99.0, 5),
        "FL-607": _flight("AF1281", "CDG", "MAD", "2025-05-04", "07:00", 110.0, 3),
        "FL-608": _flight("AF1301", "CDG", "MAD", "2025-05-04", "13:15", 95.0, 2),
    },
    "bookings": {
        "BK-3301": _booking("TV-21", "FL-601", "confirmed", "3A", 1, "QX7P2L"),
        "BK-3302": _booking("TV-22", "FL-604", "confirmed", None, 0, "M4R9TT"),
        "BK-3303": _booking("TV-23", "FL-607", "confirmed", "14C", 1, "ZP0K5D"),
        "BK-3304": _booking("TV-24", "FL-602", "cancelled", None, 0, "L8W3NB"),
        "BK-3305": _booking("TV-24", "FL-606", "confirmed", "22F", 2, "H2C6VY"),
    },
}

FLIGHTS = INIT_CONFIG["flights"]
TRAVELER = {t["name"]: tid for tid, t in INIT_CONFIG["travelers"].items()}
BY_CODE = {b["confirmation_code"]: bid for bid, b in INIT_CONFIG["bookings"].items()}


def _route(origin, destination, date):
    return sorted((fid for fid, f in FLIGHTS.items()
                   if (f["origin"], f["destination"], f["date"]) == (origin, destination, date)),
                  key=lambda fid: FLIGHTS[fid]["departure"])


def _seats(fid: str, delta: int) -> dict:
    return check(f"{fid} has {FLIGHTS[fid]['seats_left'] + delta} seats left",
                 f"s['flights'][{fid!r}]['seats_left'] == {FLIGHTS[fid]['seats_left'] + delta}")


def _booked(tid: str, fid: str) -> dict:
    return check(f"{tid} booked on {fid}", f"any(b['traveler_id'] == {tid!r} and b['flight_id'] == {fid!r} and "
                                           f"b['status'] == 'confirmed' for b in s['bookings'].values())")


def _date(day: str) -> str:
    return {"2025-05-02": "2 May 2025", "2025-05-03": "3 May 2025", "2025-05-04": "4 May 2025"}[day]


def build(book: TaskBook) -> None:
    # Book the cheapest / earliest flight on a route and day.
    for name, origin, destination, day, rule in [
            ("Fatima Zahra", "LHR", "CPH", "2025-05-02", "cheapest"), ("Lucas Schmidt", "FRA", "LHR", "2025-05-02", "cheapest"),
            ("Daniel Kim", "CDG", "MAD", "2025-05-04", "cheapest"), ("Amelia Clarke", "FRA", "LHR", "2025-05-02", "cheapest"),
            ("Daniel Kim", "LHR", "CPH", "2025-05-03", "cheapest"), ("Lucas Schmidt", "LHR", "CPH", "2025-05-02", "earliest"),
            ("Amelia Clarke", "CDG", "MAD", "2025-05-04", "earliest"), ("Fatima Zahra", "FRA", "LHR", "2025-05-02", "earliest")]:
        tid = TRAVELER[name]
        open_ = [fid for fid in _route(origin, destination, day) if FLIGHTS[fid]["seats_left"] > 0]
        fid = min(open_, key=lambda f: FLIGHTS[f]["price"]) if rule == "cheapest" else open_[0]
        what = "the cheapest" if rule == "cheapest" else "the earliest-departing"
        book.add(f"Book {name} on {what} flight from {origin} to {destination} on {_date(day)} that still has seats.",
                 [_booked(tid, fid), _seats(fid, -1)],
                 [call("find_traveler", name=name),
                  call("search_flights", origin=origin, destination=destination, date=day),
                  call("book_flight", traveler_id=tid, flight_id=fid)])

    # Change flight by confirmation code.
    for code, target, text in [
            ("QX7P2L", "FL-602", "to the evening flight SK218 on the same day"),
            ("M4R9TT", "FL-606", "to the 14:00 flight LH905 if it has seats, otherwise to the evening flight LH907"),
            ("ZP0K5D", "FL-608", "to the afternoon flight AF1301 on the same day"),
            ("H2C6VY", "FL-604", "to the morning flight LH903 on the same day")]:
        bid = BY_CODE[code]
        old = INIT_CONFIG["bookings"][bid]["flight_id"]
        f = FLIGHTS[old]
        book.add(f"Booking {code}: move the traveller {text}.",
                 [check(f"{bid} on {target}", f"s['bookings'][{bid!r}]['flight_id'] == {target!r} and "
                                              f"s['bookings'][{bid!r}]['status'] == 'confirmed'"),
                  _seats(old, +1)],
                 [call("get_booking", confirmation_code=code),
                  call("search_flights", origin=f["origin"], destination=f["destination"], date=f["date"]),
                  call("change_flight", booking_id=bid, new_flight_id=target)])
    book.add("Amelia Clarke wants to fly one day later than booked, on the same flight number. Change her "
             "booking.",
             [check("BK-3301 on FL-603", "s['bookings']['BK-3301']['flight_id'] == 'FL-603'"), _seats("FL-601", +1)],
             [call("find_traveler", name="Amelia Clarke"), call("list_bookings", traveler_id="TV-21"),
              call("search_flights", origin="LHR", destination="CPH", date="2025-05-03"),
              call("change_flight", booking_id="BK-3301", new_flight_id="FL-603")])

    # Cancel by confirmation code.
    for code in ["QX7P2L", "ZP0K5D", "H2C6VY"]:
        bid = BY_CODE[code]
        book.add(f"Cancel booking {code}.",
                 [check(f"{bid} cancelled", f"s['bookings'][{bid!r}]['status'] == 'cancelled'"),
                  _seats(INIT_CONFIG["bookings"][bid]["flight_id"], +1)],
                 [call("get_booking", confirmation_code=code), call("cancel_booking", booking_id=bid)])

    # Seats.
    for code, seat in [("M4R9TT", "12A"), ("QX7P2L", "1C"), ("ZP0K5D", "2A"), ("H2C6VY", "22A")]:
        bid = BY_CODE[code]
        book.add(f"The traveller on booking {code} would like seat {seat}. Assign it.",
                 [check(f"{bid} seat {seat}", f"s['bookings'][{bid!r}]['seat'] == {seat!r}")],
                 [call("get_booking", confirmation_code=code), call("assign_seat", booking_id=bid, seat=seat)])

    # Bags, by name or code.
    for name, bags in [("Amelia Clarke", 2), ("Daniel Kim", 1), ("Lucas Schmidt", 3)]:
        tid = TRAVELER[name]
        bid = next(b for b, x in INIT_CONFIG["bookings"].items() if x["traveler_id"] == tid and x["status"] == "confirmed")
        book.add(f"{name} wants {bags} checked bag{'s' if bags > 1 else ''} on their confirmed booking.",
                 [check(f"{bid} has {bags} bags", f"s['bookings'][{bid!r}]['bags'] == {bags}")],
                 [call("find_traveler", name=name), call("list_bookings", traveler_id=tid),
                  call("update_baggage", booking_id=bid, bags=bags)])
    book.add("Booking ZP0K5D: the traveller will only bring hand luggage. Remove all checked bags.",
             [check("BK-3303 has 0 bags", "s['bookings']['BK-3303']['bags'] == 0")],
             [call("get_booking", confirmation_code="ZP0K5D"), call("update_baggage", booking_id="BK-3303", bags=0)])

    book.add("Book Fatima Zahra on the cheapest flight from LHR to CPH on 2 May 2025, give her seat 7D and one "
             "checked bag.",
             [_booked("TV-23", "FL-602"),
              check("seat 7D on the new booking", "any(b['traveler_id'] == 'TV-23' and b['flight_id'] == 'FL-602' and "
                                                  "b['seat'] == '7D' for b in s['bookings'].values())"),
              check("one bag on the new booking", "any(b['traveler_id'] == 'TV-23' and b['flight_id'] == 'FL-602' and "
                                                  "b['bags'] == 1 for b in s['bookings'].values())")],
             [call("find_traveler", name="Fatima Zahra"),
              call("search_flights", origin="LHR", destination="CPH", date="2025-05-02"),
              call("book_flight", traveler_id="TV-23", flight_id="FL-602"),
              call("assign_seat", booking_id="BK-3306", seat="7D"),
              call("update_baggage", booking_id="BK-3306", bags=1)])
