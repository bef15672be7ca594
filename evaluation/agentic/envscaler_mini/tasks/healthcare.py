"""Healthcare: patients by name, doctors by specialty or name, then bookings, allergies, prescriptions."""

from ._common import TaskBook, call, check

ENV_CLASS = "ClinicScheduler"

INIT_CONFIG = {
    "patients": {
        "PT-301": {"name": "Elena Petrova", "date_of_birth": "1984-06-02", "allergies": ["penicillin"]},
        "PT-302": {"name": "Samuel Okafor", "date_of_birth": "1979-11-23", "allergies": []},
        "PT-303": {"name": "Chloe Dubois", "date_of_birth": "1992-02-14", "allergies": ["latex"]},
        "PT-304": {"name": "Rafael Gomez", "date_of_birth": "1967-09-30", "allergies": []},
    },
    "doctors": {
        "D-11": {"name": "Dr. Anna Weiss", "specialty": "cardiology",
                 "open_slots": ["2025-03-12 09:00", "2025-03-12 10:30", "2025-03-14 14:00"]},
        "D-12": {"name": "Dr. Ben Carter", "specialty": "dermatology",
                 "open_slots": ["2025-03-11 11:00", "2025-03-13 15:30"]},
        "D-13": {"name": "Dr. Mei Lin", "specialty": "general practice",
                 "open_slots": ["2025-03-11 08:30", "2025-03-11 09:00", "2025-03-12 16:00"]},
        "D-14": {"name": "Dr. Omar Haddad", "specialty": "orthopedics",
                 "open_slots": ["2025-03-13 10:00", "2025-03-17 13:00"]},
    },
    "appointments": {
        "A-901": {"patient_id": "PT-301", "doctor_id": "D-11", "slot": "2025-03-11 10:00",
                  "status": "scheduled", "reason": "palpitations"},
        "A-902": {"patient_id": "PT-302", "doctor_id": "D-13", "slot": "2025-03-12 09:30",
                  "status": "scheduled", "reason": "annual check-up"},
        "A-903": {"patient_id": "PT-303", "doctor_id": "D-12", "slot": "2025-03-13 09:00",
                  "status": "scheduled", "reason": "skin rash"},
        "A-904": {"patient_id": "PT-304", "doctor_id": "D-14", "slot": "2025-03-05 10:00",
                  "status": "completed", "reason": "knee pain"},
        "A-905": {"patient_id": "PT-304", "doctor_id": "D-13", "slot": "2025-03-14 11:00",
                  "status": "scheduled", "reason": "blood pressure review"},
    },
    "prescriptions": {
        "RX-71": {"patient_id": "PT-301", "drug": "metoprolol", "dose": "25 mg", "refills_left": 0, "status": "active"},
        "RX-72": {"patient_id": "PT-304", "drug": "ibuprofen", "dose": "400 mg", "refills_left": 2, "status": "active"},
        "RX-73": {"patient_id": "PT-302", "drug": "atorvastatin", "dose": "10 mg", "refills_left": 1, "status": "active"},
    },
}

PATIENT = {p["name"]: pid for pid, p in INIT_CONFIG["patients"].items()}
DOCTORS = INIT_CONFIG["doctors"]
BY_SPECIALTY = {d["specialty"]: did for did, d in DOCTORS.items()}


def _booked(pid: str, did: str, slot: str) -> dict:
    return check(f"{pid} booked with {did} at {slot}",
                 f"any(a['patient_id'] == {pid!r} and a['doctor_id'] == {did!r} and a['slot'] == {slot!r} "
                 f"and a['status'] == 'scheduled' for a in s['appointments'].values())")


def _one_new(pid: str) -> dict:
    before = sum(1 for a in INIT_CONFIG["appointments"].values() if a["patient_id"] == pid)
    return check(f"exactly one new appointment for {pid}",
                 f"sum(1 for a in s['appointments'].values() if a['patient_id'] == {pid!r}) == {before + 1}")


def _appointment(pid: str, reason: str) -> str:
    return next(aid for aid, a in INIT_CONFIG["appointments"].items()
                if a["patient_id"] == pid and a["reason"] == reason)


def build(book: TaskBook) -> None:
    # Earliest slot with a specialty.
    for name, specialty, reason in [("Samuel Okafor", "cardiology", "chest tightness"),
                                    ("Chloe Dubois", "general practice", "persistent cough"),
                                    ("Elena Petrova", "dermatology", "mole check"),
                                    ("Rafael Gomez", "cardiology", "irregular heartbeat"),
                                    ("Elena Petrova", "orthopedics", "wrist pain")]:
        pid, did = PATIENT[name], BY_SPECIALTY[specialty]
        slot = min(DOCTORS[did]["open_slots"])
        book.add(f"Book {name} the earliest available {specialty} appointment (reason: {reason}).",
                 [_booked(pid, did, slot), _one_new(pid)],
                 [call("find_patient", name=name), call("search_doctors", specialty=specialty),
                  call("get_doctor_availability", doctor_id=did),
                  call("book_appointment", patient_id=pid, doctor_id=did, slot=slot, reason=reason)])

    # A given doctor and time.
    for name, did, slot, reason in [("Rafael Gomez", "D-13", "2025-03-12 16:00", "medication review"),
                                    ("Chloe Dubois", "D-14", "2025-03-17 13:00", "ankle sprain"),
                                    ("Samuel Okafor", "D-12", "2025-03-13 15:30", "eczema flare-up")]:
        pid, doctor = PATIENT[name], DOCTORS[did]["name"]
        surname = doctor.split()[-1]
        book.add(f"{name} would like to see {doctor} on {slot.replace(' ', ' at ')} for: {reason}. Book it.",
                 [_booked(pid, did, slot), _one_new(pid)],
                 [call("find_patient", name=name), call("search_doctors", name=surname),
                  call("book_appointment", patient_id=pid, doctor_id=did, slot=slot, reason=reason)])

    # Reschedule to the doctor's earliest or latest open slot.
    for name, reason, which in [("Elena Petrova", "palpitations", "latest"), ("Samuel Okafor", "annual check-up", "second"),
                                ("Chloe Dubois", "skin rash", "latest"), ("Rafael Gomez", "blood pressure review", "latest")]:
        pid, aid = PATIENT[name], _appointment(PATIENT[name], reason)
        old = INIT_CONFIG["appointments"][aid]
        slots = sorted(DOCTORS[old["doctor_id"]]["open_slots"])
        slot = slots[-1] if which == "latest" else slots[1]
        phrase = "the latest open slot" if which == "latest" else "the second-earliest open slot"
        book.add(f"{name} cannot make their {reason} appointment. Move it to {phrase} of the same doctor.",
                 [check(f"{aid} moved to {slot}", f"s['appointments'][{aid!r}]['slot'] == {slot!r} and "
                                                  f"s['appointments'][{aid!r}]['status'] == 'scheduled'"),
                  check(f"old slot {old['slot']} reopened",
                        f"{old['slot']!r} in s['doctors'][{old['doctor_id']!r}]['open_slots']")],
                 [call("find_patient", name=name), call("list_appointments", patient_id=pid),
                  call("get_doctor_availability", doctor_id=old["doctor_id"]),
                  call("reschedule_appointment", appointment_id=aid, new_slot=slot)])

    # Cancel.
    for name, reason in [("Chloe Dubois", "skin rash"), ("Rafael Gomez", "blood pressure review"),
                         ("Elena Petrova", "palpitations")]:
        pid, aid = PATIENT[name], _appointment(PATIENT[name], reason)
        old = INIT_CONFIG["appointments"][aid]
        book.add(f"Cancel {name}'s upcoming appointment for {reason}.",
                 [check(f"{aid} cancelled", f"s['appointments'][{aid!r}]['status'] == 'cancelled'"),
                  check("slot reopened", f"{old['slot']!r} in s['doctors'][{old['doctor_id']!r}]['open_slots']")],
                 [call("find_patient", name=name), call("list_appointments", patient_id=pid),
                  call("cancel_appointment", appointment_id=aid)])

    # Allergies.
    for name, allergy in [("Samuel Okafor", "sulfa"), ("Rafael Gomez", "aspirin"), ("Chloe Dubois", "penicillin")]:
        pid = PATIENT[name]
        kept = INIT_CONFIG["patients"][pid]["allergies"]
        book.add(f"{name} reported an allergy to {allergy}. Record it on their file.",
                 [check(f"{allergy} recorded", f"{allergy!r} in s['patients'][{pid!r}]['allergies']"),
                  check("earlier allergies kept", f"all(a in s['patients'][{pid!r}]['allergies'] for a in {kept!r}) "
                                                  f"and len(s['patients'][{pid!r}]['allergies']) == {len(kept) + 1}")],
                 [call("find_patient", name=name), call("add_allergy", patient_id=pid, allergy=allergy)])

    # New prescriptions, with an allergy-aware fallback.
    def prescribed(pid, drug, dose):
        return check(f"{drug} {dose} prescribed to {pid}",
                     f"any(r['patient_id'] == {pid!r} and r['drug'] == {drug!r} and r['dose'] == {dose!r} and "
                     f"r['status'] == 'active' for r in s['prescriptions'].values())")
    for name, drug, dose, refills in [("Samuel Okafor", "amoxicillin", "500 mg", 0),
                                      ("Chloe Dubois", "cetirizine", "10 mg", 2),
                                      ("Rafael Gomez", "omeprazole", "20 mg", 1)]:
        pid = PATIENT[name]
        refill_text = {0: "no refills", 1: "1 refill"}.get(refills, f"{refills} refills")
        book.add(f"Dr. Mei Lin asks you to prescribe {drug} {dose} with {refill_text} to {name}.",
                 [prescribed(pid, drug, dose)],
                 [call("find_patient", name=name),
                  call("prescribe_medication", patient_id=pid, drug=drug, dose=dose, refills=refills)])
    book.add("Prescribe amoxicillin 500 mg (no refills) to Elena Petrova. If her allergies rule it out, "
             "prescribe azithromycin 250 mg (no refills) instead.",
             [prescribed("PT-301", "azithromycin", "250 mg"),
              check("no amoxicillin for PT-301", "not any(r['patient_id'] == 'PT-301' and r['drug'] == 'amoxicillin' "
                                                 "for r in s['prescriptions'].values())")],
             [call("find_patient", name="Elena Petrova"),
              call("prescribe_medication", patient_id="PT-301", drug="azithromycin", dose="250 mg", refills=0)])

    # Renewals.
    for name, drug, refills in [("Elena Petrova", "metoprolol", 3), ("Samuel Okafor", "atorvastatin", 5)]:
        pid = PATIENT[name]
        rid = next(r for r, x in INIT_CONFIG["prescriptions"].items() if x["patient_id"] == pid and x["drug"] == drug)
        book.add(f"Renew {name}'s {drug} prescription so that it has {refills} refills left.",
                 [check(f"{rid} has {refills} refills", f"s['prescriptions'][{rid!r}]['refills_left'] == {refills}")],
                 [call("find_patient", name=name), call("list_prescriptions", patient_id=pid),
                  call("renew_prescription", prescription_id=rid, refills=refills)])

    book.add("Rafael Gomez's knee is worse. Book him the earliest orthopedics appointment (reason: knee pain "
             "follow-up) and renew his ibuprofen prescription with 3 refills.",
             [_booked("PT-304", "D-14", "2025-03-13 10:00"),
              check("RX-72 has 3 refills", "s['prescriptions']['RX-72']['refills_left'] == 3")],
             [call("find_patient", name="Rafael Gomez"), call("search_doctors", specialty="orthopedics"),
              call("get_doctor_availability", doctor_id="D-14"),
              call("book_appointment", patient_id="PT-304", doctor_id="D-14", slot="2025-03-13 10:00",
                   reason="knee pain follow-up"),
              call("list_prescriptions", patient_id="PT-304"),
              call("renew_prescription", prescription_id="RX-72", refills=3)])
