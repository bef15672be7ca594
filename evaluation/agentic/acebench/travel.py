"""The ACEBench travel scenario: users with cash and bank balances, a flight timetable, reservations.

Our own implementation, written from the function docs and the published tasks and final states. The
state (what the answers compare) is `users` and `reservations`; the timetable and the fare rules below
are ours, chosen so that the tasks have one right answer and the balances in the answers follow:

  - A booking costs the cabin fare of the flight plus 50 per checked bag above the free allowance
    (`FREE_BAGS`: by membership level and cabin). It is paid from the chosen balance ("cash" or "bank")
    and fails when that balance is too low.
  - `modify_flight` keeps the route (a new flight must fly the same origin -> destination), then charges
    the difference between the new and the old cost (fare + baggage fee) to `new_payment_method` or the
    reservation's own method, or refunds it there when negative.
  - `cancel_reservation` refunds the full cost to the reservation's payment method and removes it.
  - Reservations made in the episode hold no origin/destination keys (as in the answers); modifying a
    reservation that has them keeps them in step with its flight.
  - Cabins are "Economy Class" and "Business Class" (`economy`, `business` and the Chinese names are
    accepted and stored in that form).

The timetable makes each task's answer unique: the latest Shanghai -> Beijing flight on July 16-17 is
CZ4352; Eve's return MU5678 (July 16, morning) moved to that evening is CZ4321, to the next evening
CZ4352; Beijing -> Shenzhen has no direct flight and the only Nanjing connection is MU3561 + CZ1765
(CZ1701 leaves Nanjing before MU3561 lands), whose business fares together exceed Grace's bank balance;
Beijing -> Nanjing on July 18 is MU3561 (morning) or MU1566 (evening, business affordable).
"""

from __future__ import annotations

from typing import Any

from evaluation.agentic.acebench.common import ScenarioApi, ToolError

ECONOMY, BUSINESS = "Economy Class", "Business Class"
CABIN_ALIASES = {"economy class": ECONOMY, "economy": ECONOMY, "经济舱": ECONOMY,
                 "business class": BUSINESS, "business": BUSINESS, "商务舱": BUSINESS}
FREE_BAGS = {("regular", ECONOMY): 1, ("regular", BUSINESS): 2, ("silver", ECONOMY): 2, ("silver", BUSINESS): 3,
             ("gold", ECONOMY): 3, ("gold", BUSINESS): 4}
BAG_FEE = 50.0

# flight_no, origin, destination, departure, arrival, economy fare, business fare
_TIMETABLE = [
    ("CA1234", "Beijing", "Shanghai", "2024-07-15 08:00", "2024-07-15 10:20", 1200.0, 2500.0),
    ("MU1190", "Beijing", "Shanghai", "2024-07-17 14:00", "2024-07-17 16:20", 1100.0, 2400.0),
    ("MU5678", "Shanghai", "Beijing", "2024-07-16 09:00", "2024-07-16 11:20", 1300.0, 2700.0),
    ("CZ4321", "Shanghai", "Beijing", "2024-07-16 19:00", "2024-07-16 21:20", 1400.0, 2700.0),
    ("CZ4352", "Shanghai", "Beijing", "2024-07-17 20:00", "2024-07-17 22:20", 1600.0, 3100.0),
    ("FM9101", "Shanghai", "Beijing", "2024-07-18 21:30", "2024-07-18 23:50", 1000.0, 2200.0),
    ("MU3561", "Beijing", "Nanjing", "2024-07-18 08:00", "2024-07-18 10:00", 1500.0, 3000.0),
    ("MU1566", "Beijing", "Nanjing", "2024-07-18 19:00", "2024-07-18 21:00", 1800.0, 4000.0),
    ("CZ1701", "Nanjing", "Shenzhen", "2024-07-18 09:30", "2024-07-18 12:00", 1400.0, 2600.0),
    ("CZ1765", "Nanjing", "Shenzhen", "2024-07-18 12:30", "2024-07-18 15:00", 1500.0, 2800.0),
    ("MH1765", "Xiamen", "Chengdu", "2024-07-20 10:00", "2024-07-20 12:30", 1000.0, 2000.0),
    ("MU2616", "Chengdu", "Xiamen", "2024-07-25 16:00", "2024-07-25 18:30", 1000.0, 2000.0),
]
FLIGHTS: dict[str, dict[str, Any]] = {
    no: {"flight_no": no, "origin": o, "destination": d, "depart_time": dep, "arrival_time": arr,
         "prices": {ECONOMY: eco, BUSINESS: bus}}
    for no, o, d, dep, arr, eco, bus in _TIMETABLE}


class Travel(ScenarioApi):
    NAME = "Travel"
    FIELDS = ("users", "reservations")
    TOOLS = ("get_user_details", "get_flight_details", "get_reservation_details", "find_transfer_flights",
             "reserve_flight", "cancel_reservation", "modify_flight")

    def __init__(self) -> None:
        self.users: dict[str, dict[str, Any]] = {
            "user1": _user("Eve", "password123", 2000.0, 50000.0, "regular"),
            "user2": _user("Frank", "password456", 8000.0, 8000.0, "silver"),
            "user3": _user("Grace", "password789", 1000.0, 5000.0, "gold"),
        }
        self.reservations: list[dict[str, Any]] = [
            _reservation("res_1", "user1", "CA1234", "bank", ECONOMY, 1, route=True),
            _reservation("res_2", "user1", "MU5678", "bank", BUSINESS, 1, route=True),
            _reservation("res_3", "user2", "MH1765", "bank", BUSINESS, 1, route=True),
            _reservation("res_4", "user2", "MU2616", "bank", BUSINESS, 1, route=True),
        ]
        self._last_reservation = 0

    # ---- queries

    def get_user_details(self, user_id: str, password: str) -> dict[str, Any]:
        user = self._authenticate(user_id, password)
        return {"user_id": user_id, **{k: v for k, v in user.items() if k != "password"}}

    def get_flight_details(self, origin: str | None = None,
                           destination: str | None = None) -> list[dict[str, Any]] | str:
        found = [f for f in FLIGHTS.values() if _same(origin, f["origin"]) and _same(destination, f["destination"])]
        return found or f"No flights from {origin or 'any city'} to {destination or 'any city'}."

    def get_reservation_details(self, reservation_id: str | None = None,
                                user_id: str | None = None) -> list[dict[str, Any]]:
        if reservation_id is None and user_id is None:
            raise ToolError("give a reservation_id or a user_id")
        found = [{**r, **_schedule(r["flight_no"])} for r in self.reservations
                 if _same(reservation_id, r["reservation_id"]) and _same(user_id, r["user_id"])]
        if not found:
            raise ToolError("no matching reservation")
        return found

    def find_transfer_flights(self, origin_city: str, transfer_city: str,
                              destination_city: str) -> list[dict[str, Any]] | str:
        """Pairs of flights via `transfer_city` where the first lands before the second departs."""
        firsts = [f for f in FLIGHTS.values()
                  if _same(origin_city, f["origin"]) and _same(transfer_city, f["destination"])]
        seconds = [f for f in FLIGHTS.values()
                   if _same(transfer_city, f["origin"]) and _same(destination_city, f["destination"])]
        pairs = [{"first_flight": a, "second_flight": b} for a in firsts for b in seconds
                 if a["arrival_time"] < b["depart_time"]]
        return pairs or f"No transfer flights from {origin_city} via {transfer_city} to {destination_city}."

    # ---- changes

    def reserve_flight(self, user_id: str, password: str, flight_no: str, cabin: str, payment_method: str,
                       baggage_count: int) -> dict[str, Any]:
        user = self._authenticate(user_id, password)
        flight, cabin, method = self._flight(flight_no), _cabin(cabin), _method(payment_method)
        if baggage_count < 0:
            raise ToolError("baggage_count cannot be negative")
        cost = self._cost(user, flight["flight_no"], cabin, baggage_count)
        self._charge(user, method, cost)
        self._last_reservation = max([self._last_reservation, *(_res_number(r) for r in self.reservations)]) + 1
        reservation = _reservation(f"res_{self._last_reservation}", user_id, flight["flight_no"], method, cabin,
                                   baggage_count, route=False)
        self.reservations.append(reservation)
        return {"status": "reserved", **reservation, "charged": cost, f"{method}_balance": user[f"{method}_balance"]}

    def modify_flight(self, user_id: str, reservation_id: str, new_flight_no: str | None = None,
                      new_cabin: str | None = None, add_baggage: int = 0,
                      new_payment_method: str | None = None) -> dict[str, Any]:
        user = self._user(user_id)
        r = self._reservation(user_id, reservation_id)
        old = FLIGHTS[r["flight_no"]]
        flight = self._flight(new_flight_no) if new_flight_no is not None else old
        if (flight["origin"], flight["destination"]) != (old["origin"], old["destination"]):
            raise ToolError(f"{flight['flight_no']} flies {flight['origin']} -> {flight['destination']}, but the "
                            f"reservation is for {old['origin']} -> {old['destination']}")
        cabin = _cabin(new_cabin) if new_cabin is not None else r["cabin"]
        if add_baggage < 0:
            raise ToolError("add_baggage cannot be negative")
        method = _method(new_payment_method) if new_payment_method is not None else r["payment_method"]
        difference = (self._cost(user, flight["flight_no"], cabin, r["baggage"] + add_baggage)
                      - self._cost(user, r["flight_no"], r["cabin"], r["baggage"]))
        self._charge(user, method, difference)
        r.update(flight_no=flight["flight_no"], cabin=cabin, baggage=r["baggage"] + add_baggage)
        if "origin" in r:
            r.update(origin=flight["origin"], destination=flight["destination"])
        return {"status": "modified", **r, "charged": difference, f"{method}_balance": user[f"{method}_balance"]}

    def cancel_reservation(self, user_id: str, reservation_id: str, reason: str) -> dict[str, Any]:
        user = self._user(user_id)
        r = self._reservation(user_id, reservation_id)
        refund = self._cost(user, r["flight_no"], r["cabin"], r["baggage"])
        self._charge(user, r["payment_method"], -refund)
        self.reservations.remove(r)
        return {"status": "cancelled", "reservation_id": r["reservation_id"], "reason": reason, "refunded": refund}

    # ---- helpers

    def _user(self, user_id: str) -> dict[str, Any]:
        if user_id not in self.users:
            raise ToolError(f"unknown user id {user_id!r}")
        return self.users[user_id]

    def _authenticate(self, user_id: str, password: str) -> dict[str, Any]:
        user = self._user(user_id)
        if user["password"] != password:
            raise ToolError("wrong password")
        return user

    def _flight(self, flight_no: str) -> dict[str, Any]:
        if flight_no.strip().upper() not in FLIGHTS:
            raise ToolError(f"unknown flight {flight_no!r}")
        return FLIGHTS[flight_no.strip().upper()]

    def _reservation(self, user_id: str, reservation_id: str) -> dict[str, Any]:
        for r in self.reservations:
            if r["reservation_id"] == reservation_id:
                if r["user_id"] != user_id:
                    raise ToolError(f"reservation {reservation_id} does not belong to {user_id}")
                return r
        raise ToolError(f"no reservation {reservation_id!r}")

    def _cost(self, user: dict[str, Any], flight_no: str, cabin: str, bags: int) -> float:
        free = FREE_BAGS[(user["membership_level"], cabin)]
        return FLIGHTS[flight_no]["prices"][cabin] + BAG_FEE * max(0, bags - free)

    def _charge(self, user: dict[str, Any], method: str, amount: float) -> None:
        """Take `amount` from the balance (a negative amount is a refund)."""
        field = f"{method}_balance"
        if amount > user[field]:
            raise ToolError(f"insufficient {method} balance: {amount} needed, {user[field]} available")
        user[field] -= amount


def _user(name: str, password: str, cash: float, bank: float, level: str) -> dict[str, Any]:
    return {"user_name": name, "password": password, "cash_balance": cash, "bank_balance": bank,
            "membership_level": level}


def _reservation(rid: str, user_id: str, flight_no: str, method: str, cabin: str, bags: int,
                 route: bool) -> dict[str, Any]:
    r = {"reservation_id": rid, "user_id": user_id, "flight_no": flight_no, "payment_method": method, "cabin": cabin,
         "baggage": bags}
    if route:
        r.update(origin=FLIGHTS[flight_no]["origin"], destination=FLIGHTS[flight_no]["destination"])
    return r


def _schedule(flight_no: str) -> dict[str, str]:
    f = FLIGHTS.get(flight_no, {})
    return {k: f[k] for k in ("origin", "destination", "depart_time", "arrival_time") if k in f}


def _res_number(r: dict[str, Any]) -> int:
    suffix = str(r["reservation_id"]).removeprefix("res_")
    return int(suffix) if suffix.isdigit() else 0


def _same(wanted: str | None, value: str) -> bool:
    """A filter: None matches anything; otherwise equal up to case and surrounding blanks."""
    return wanted is None or wanted.strip().casefold() == value.casefold()


def _cabin(cabin: str) -> str:
    if cabin.strip().casefold() not in CABIN_ALIASES:
        raise ToolError(f"unknown cabin {cabin!r}; use {ECONOMY!r} or {BUSINESS!r}")
    return CABIN_ALIASES[cabin.strip().casefold()]


def _method(method: str) -> str:
    if method.strip().casefold() not in ("cash", "bank"):
        raise ToolError(f"payment method must be 'cash' or 'bank', got {method!r}")
    return method.strip().casefold()


def make_travel() -> list[ScenarioApi]:
    return [Travel()]
